import CCrypto

/// Ed25519 signatures through OpenSSL (for signed checkpoints). Keys travel as PEM text.
public enum Ed25519 {
    public struct Failure: CodedError, Sendable {
        public let message: String
        /// `bad_key`.
        public var errorCode: String { "bad_key" }
    }

    /// A new key pair: (private key PEM, public key PEM).
    public static func generateKeyPair() throws -> (privateKey: String, publicKey: String) {
        guard let ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_ED25519, nil) else { throw Failure(message: "OpenSSL cannot create an Ed25519 context") }
        defer { EVP_PKEY_CTX_free(ctx) }
        var key: OpaquePointer?
        guard EVP_PKEY_keygen_init(ctx) == 1, EVP_PKEY_keygen(ctx, &key) == 1, let key else {
            throw Failure(message: "OpenSSL could not generate an Ed25519 key")
        }
        defer { EVP_PKEY_free(key) }
        return (try pem { PEM_write_bio_PrivateKey($0, key, nil, nil, 0, nil, nil) }, try pem { PEM_write_bio_PUBKEY($0, key) })
    }

    private static func pem(_ write: (OpaquePointer) -> Int32) throws -> String {
        guard let bio = BIO_new(BIO_s_mem()) else { throw Failure(message: "OpenSSL cannot allocate a buffer") }
        defer { BIO_free(bio) }
        guard write(bio) == 1 else { throw Failure(message: "OpenSSL cannot write the key as PEM") }
        var out: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 1024)
        while true {
            let n = chunk.withUnsafeMutableBytes { BIO_read(bio, $0.baseAddress, Int32($0.count)) }
            if n <= 0 { break }
            out.append(contentsOf: chunk[0..<Int(n)])
        }
        return String(decoding: out, as: UTF8.self)
    }

    private static func readKey(_ pem: String, isPrivate: Bool) throws -> OpaquePointer {
        let bytes = Array(pem.utf8)
        let key: OpaquePointer? = bytes.withUnsafeBytes { raw in
            guard let bio = BIO_new_mem_buf(raw.baseAddress, Int32(raw.count)) else { return nil }
            defer { BIO_free(bio) }
            return isPrivate ? PEM_read_bio_PrivateKey(bio, nil, nil, nil) : PEM_read_bio_PUBKEY(bio, nil, nil, nil)
        }
        guard let key, EVP_PKEY_get_id(key) == EVP_PKEY_ED25519 else {
            if let key { EVP_PKEY_free(key) }
            throw Failure(message: "not an Ed25519 \(isPrivate ? "private" : "public") key in PEM form (make one with `referral-ledger keygen`)")
        }
        return key
    }

    /// Signs `message`; answers the 64-byte signature as lowercase hex.
    public static func sign(_ message: [UInt8], privateKeyPEM: String) throws -> String {
        let key = try readKey(privateKeyPEM, isPrivate: true)
        defer { EVP_PKEY_free(key) }
        guard let ctx = EVP_MD_CTX_new() else { throw Failure(message: "OpenSSL cannot create a signing context") }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestSignInit(ctx, nil, nil, nil, key) == 1 else { throw Failure(message: "OpenSSL cannot start signing") }
        var signature = [UInt8](repeating: 0, count: 64)
        var length = 64
        let rc = message.withUnsafeBufferPointer { m in
            signature.withUnsafeMutableBufferPointer { s in EVP_DigestSign(ctx, s.baseAddress, &length, m.baseAddress, m.count) }
        }
        guard rc == 1 else { throw Failure(message: "OpenSSL could not sign") }
        return Hex.encode(Array(signature[0..<length]))
    }

    /// Whether `signatureHex` is a valid signature of `message` under the public key.
    public static func verify(_ message: [UInt8], signatureHex: String, publicKeyPEM: String) throws -> Bool {
        let key = try readKey(publicKeyPEM, isPrivate: false)
        defer { EVP_PKEY_free(key) }
        guard let signature = Hex.decode(signatureHex), let ctx = EVP_MD_CTX_new() else { return false }
        defer { EVP_MD_CTX_free(ctx) }
        guard EVP_DigestVerifyInit(ctx, nil, nil, nil, key) == 1 else { return false }
        return message.withUnsafeBufferPointer { m in
            signature.withUnsafeBufferPointer { s in EVP_DigestVerify(ctx, s.baseAddress, s.count, m.baseAddress, m.count) }
        } == 1
    }
}
