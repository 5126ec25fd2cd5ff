#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The socket address handed to libmicrohttpd through `MHD_OPTION_SOCK_ADDR`,
/// so that exactly the configured host is bound (MHD's default is every interface).
struct ListenAddress {
    let isIPv6: Bool
    private var storage = sockaddr_storage()

    /// Accepts an IPv4 dotted quad, an IPv6 address (bare or in brackets) or
    /// `localhost` (127.0.0.1). Host names are not resolved.
    init(host: String, port: UInt16) throws(HTTPServerError) {
        var literal = host.lowercased() == "localhost" ? "127.0.0.1" : host
        if literal.hasPrefix("["), literal.hasSuffix("]") {
            literal = String(literal.dropFirst().dropLast())
        }
        var v4 = sockaddr_in()
        var v6 = sockaddr_in6()
        if inet_pton(AF_INET, literal, &v4.sin_addr) == 1 {
            isIPv6 = false
            v4.sin_family = sa_family_t(AF_INET)
            v4.sin_port = port.bigEndian
            withUnsafeMutableBytes(of: &storage) { destination in
                withUnsafeBytes(of: v4) { destination.copyMemory(from: $0) }
            }
        } else if inet_pton(AF_INET6, literal, &v6.sin6_addr) == 1 {
            isIPv6 = true
            v6.sin6_family = sa_family_t(AF_INET6)
            v6.sin6_port = port.bigEndian
            withUnsafeMutableBytes(of: &storage) { destination in
                withUnsafeBytes(of: v6) { destination.copyMemory(from: $0) }
            }
        } else {
            throw HTTPServerError(
                code: .invalidHost,
                message: "host \"\(host)\" is not an IPv4/IPv6 address or localhost")
        }
    }

    /// Calls `body` with a pointer to the address, valid only during the call.
    func withSocketAddress<Result>(_ body: (UnsafePointer<sockaddr>) throws -> Result) rethrows -> Result {
        try withUnsafeBytes(of: storage) { bytes in
            try body(bytes.baseAddress!.assumingMemoryBound(to: sockaddr.self))
        }
    }
}
