import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// A raw TCP receiver on 127.0.0.1 that answers every request `200` with a `Content-Length` of
/// `bodyBytes`, then sends the body one byte every `secondsPerByte`: an answer that never stalls
/// long enough for an idle timeout, yet takes `bodyBytes × secondsPerByte` in all.
final class TricklingReceiver: @unchecked Sendable {
    let port: UInt16
    private let listener: Int32

    init(bodyBytes: Int, secondsPerByte: UInt32) throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var one: Int32 = 1
        setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(listener, 8) == 0 else { throw POSIXError(.EADDRINUSE) }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) }
        }
        port = UInt16(bigEndian: address.sin_port)
        Thread.detachNewThread {
            while true {
                let connection = accept(listener, nil, nil)
                if connection < 0 { return }
                Thread.detachNewThread {
                    var buffer = [UInt8](repeating: 0, count: 65536)
                    _ = read(connection, &buffer, buffer.count)
                    let head = "HTTP/1.1 200 OK\r\nContent-Length: \(bodyBytes)\r\nConnection: close\r\n\r\n"
                    // send with MSG_NOSIGNAL: the client hangs up at its timeout, and a plain write
                    // to that socket would raise SIGPIPE and kill the test process.
                    _ = head.withCString { send(connection, $0, strlen($0), Int32(MSG_NOSIGNAL)) }
                    for _ in 0..<bodyBytes {
                        sleep(secondsPerByte)
                        var byte: UInt8 = 0x61
                        if send(connection, &byte, 1, Int32(MSG_NOSIGNAL)) != 1 { break }
                    }
                    close(connection)
                }
            }
        }
    }

    deinit {
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }
}
