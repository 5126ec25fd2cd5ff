import CCrypto

/// SHA-256 and HMAC-SHA256 through OpenSSL's libcrypto. A failure of libcrypto itself (these
/// calls only fail when it cannot work at all) stops the process: a hash of zeros chained into the
/// log, or a webhook signed with one, would be wrong for ever.
public enum SHA256 {
    public static let zeroHex = String(repeating: "0", count: 64)

    public static func digest(_ bytes: UnsafeRawBufferPointer) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: 32)
        let done = out.withUnsafeMutableBufferPointer { o in
            CCrypto.SHA256(bytes.baseAddress?.assumingMemoryBound(to: UInt8.self), bytes.count, o.baseAddress) != nil
        }
        precondition(done, "OpenSSL's SHA256 failed")
        return out
    }

    public static func digest(_ bytes: [UInt8]) -> [UInt8] {
        bytes.withUnsafeBytes { digest($0) }
    }

    public static func hex(_ bytes: [UInt8]) -> String { Hex.encode(digest(bytes)) }
    public static func hex(_ bytes: UnsafeRawBufferPointer) -> String { Hex.encode(digest(bytes)) }
    public static func hex(_ text: String) -> String { hex(Array(text.utf8)) }

    /// HMAC-SHA256 of `message` under `key`, lowercase hex.
    public static func hmacHex(key: [UInt8], message: [UInt8]) -> String {
        var out = [UInt8](repeating: 0, count: 32)
        var length: UInt32 = 32
        let done = key.withUnsafeBufferPointer { k in
            message.withUnsafeBufferPointer { m in
                out.withUnsafeMutableBufferPointer { o in
                    HMAC(EVP_sha256(), k.baseAddress, Int32(clamping: k.count), m.baseAddress, m.count, o.baseAddress, &length) != nil
                }
            }
        }
        precondition(done && length == 32, "OpenSSL's HMAC-SHA256 failed")
        return Hex.encode(out)
    }

    /// SHA-256 of bytes given a part at a time (a file read in chunks).
    public final class Hasher {
        private let context: OpaquePointer
        private var digest: String?

        public init() {
            guard let context = EVP_MD_CTX_new(), EVP_DigestInit_ex(context, EVP_sha256(), nil) == 1 else {
                preconditionFailure("OpenSSL's SHA256 failed")
            }
            self.context = context
        }

        deinit { EVP_MD_CTX_free(context) }

        public func update(_ bytes: UnsafeRawBufferPointer) {
            precondition(digest == nil, "SHA256.Hasher.update after finalHex")
            precondition(EVP_DigestUpdate(context, bytes.baseAddress, bytes.count) == 1, "OpenSSL's SHA256 failed")
        }

        /// The digest of every part given, in lowercase hex (no part may follow; asked again, the same).
        public func finalHex() -> String {
            if let digest { return digest }
            var out = [UInt8](repeating: 0, count: 32)
            var length: UInt32 = 0
            let done = out.withUnsafeMutableBufferPointer { EVP_DigestFinal_ex(context, $0.baseAddress, &length) == 1 }
            precondition(done && length == 32, "OpenSSL's SHA256 failed")
            digest = Hex.encode(out)
            return digest!
        }
    }
}

public enum Hex {
    private static let digits: [UInt8] = Array("0123456789abcdef".utf8)

    public static func encode(_ bytes: [UInt8]) -> String {
        var out = [UInt8](repeating: 0, count: bytes.count * 2)
        encode(bytes, into: &out)
        return String(decoding: out, as: UTF8.self)
    }

    /// Writes the lowercase hex digits of `bytes` over `out` (which holds twice as many).
    public static func encode(_ bytes: [UInt8], into out: inout [UInt8]) {
        precondition(out.count == bytes.count * 2)
        for (i, b) in bytes.enumerated() {
            out[2 * i] = digits[Int(b >> 4)]
            out[2 * i + 1] = digits[Int(b & 0xF)]
        }
    }

    /// The value of one hex digit (either case), or nil.
    @inline(__always)
    public static func value(ofDigit c: UInt8) -> UInt8? {
        switch c {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): c - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): c - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): c - UInt8(ascii: "A") + 10
        default: nil
        }
    }

    public static func decode(_ text: String) -> [UInt8]? {
        let b = Array(text.utf8)
        guard b.count % 2 == 0 else { return nil }
        var out = [UInt8]()
        out.reserveCapacity(b.count / 2)
        var i = 0
        while i < b.count {
            guard let h = value(ofDigit: b[i]), let l = value(ofDigit: b[i + 1]) else { return nil }
            out.append(h << 4 | l)
            i += 2
        }
        return out
    }
}

/// Bytes from the operating system's secure random source (OpenSSL's RAND_bytes).
public enum SecureRandom {
    public static func bytes(_ count: Int) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        let rc = out.withUnsafeMutableBufferPointer { RAND_bytes($0.baseAddress, Int32(count)) }
        precondition(rc == 1, "the secure random source failed")
        return out
    }

    /// A uniformly drawn index in 0..<bound, by rejection sampling.
    public static func index(below bound: Int) -> Int {
        precondition(bound > 0 && bound <= 256)
        let limit = 256 - 256 % bound
        while true {
            for b in bytes(16) where Int(b) < limit { return Int(b) % bound }
        }
    }
}
