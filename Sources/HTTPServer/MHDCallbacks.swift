import CMicroHTTPD
#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#endif

/// The C entry points handed to libmicrohttpd. Each one recovers the
/// `ServerCore` from its closure pointer (unretained: `HTTPServer` keeps it
/// alive until the daemon is stopped) and forwards to it.
enum MHDCallbacks {
    /// `MHD_OPTION_URI_LOG_CALLBACK`: runs once per request, right after the
    /// request line, with the target exactly as sent. Its return value becomes
    /// the request's `req_cls` context pointer.
    static let uriLogged: @convention(c) (
        UnsafeMutableRawPointer?, UnsafePointer<CChar>?, OpaquePointer?
    ) -> UnsafeMutableRawPointer? = { closure, uri, _ in
        let core = Unmanaged<ServerCore>.fromOpaque(closure!).takeUnretainedValue()
        return core.beginRequest(target: uri.map { String(cString: $0) } ?? "/")
    }

    /// The access handler (`MHD_AccessHandlerCallback`).
    static let accessHandler: MHD_AccessHandlerCallback = {
        closure, connection, _, method, version, uploadData, uploadDataSize, contextSlot in
        guard let closure, let connection, let uploadDataSize, let contextSlot,
              let pointer = contextSlot.pointee else { return .NO }
        let core = Unmanaged<ServerCore>.fromOpaque(closure).takeUnretainedValue()
        let context = Unmanaged<RequestContext>.fromOpaque(pointer).takeUnretainedValue()
        return core.handle(
            connection: connection,
            method: context.method ?? method.map { String(cString: $0) } ?? "GET",
            version: version,
            context: context,
            upload: uploadData.map(UnsafeRawPointer.init),
            uploadSize: uploadDataSize)
    }

    /// `MHD_OPTION_NOTIFY_COMPLETED`: the request is over (answered or not).
    static let requestCompleted: MHD_RequestCompletedCallback = {
        closure, connection, contextSlot, termination in
        guard let closure, let contextSlot else { return }
        let core = Unmanaged<ServerCore>.fromOpaque(closure).takeUnretainedValue()
        core.endRequest(connection: connection, contextSlot: contextSlot, termination: termination)
    }

    /// `MHD_OPTION_EXTERNAL_LOGGER`: printf-style messages from MHD.
    static let logger: MHD_LogCallback = { closure, format, arguments in
        guard let closure, let format, let arguments else { return }
        var buffer = [CChar](repeating: 0, count: 512)
        _ = vsnprintf(&buffer, buffer.count, format, arguments)
        let length = buffer.firstIndex(of: 0) ?? buffer.count
        var message = String(decoding: buffer[..<length].map { UInt8(bitPattern: $0) }, as: UTF8.self)
        while message.hasSuffix("\n") { message.removeLast() }
        Unmanaged<ServerCore>.fromOpaque(closure).takeUnretainedValue().log(message)
    }

    /// Iterator for `MHD_get_connection_values_n`: collects request headers
    /// into the `[String: String]` its closure points to.
    static let collectHeader: MHD_KeyValueIteratorN = { closure, _, key, keySize, value, valueSize in
        guard let closure, let key else { return .YES }
        let headers = closure.assumingMemoryBound(to: [String: String].self)
        let name = String(decoding: UnsafeRawBufferPointer(start: key, count: keySize), as: UTF8.self)
            .lowercased()
        let text = value.map {
            String(decoding: UnsafeRawBufferPointer(start: $0, count: valueSize), as: UTF8.self)
        } ?? ""
        if let earlier = headers.pointee[name] {
            headers.pointee[name] = earlier + ", " + text
        } else {
            headers.pointee[name] = text
        }
        return .YES
    }
}
