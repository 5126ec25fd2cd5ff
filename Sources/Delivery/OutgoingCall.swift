import Foundation

/// One outside call the worker makes: always a POST with a body and its `Content-Length`.
struct OutgoingCall: Sendable {
    var url: URL
    var headers: [(name: String, value: String)]
    var body: [UInt8]
    /// The app's secrets, never sent as such: an answer quoting them is recorded without them.
    var secrets: [String] = []

    init(url: URL, headers: [(name: String, value: String)], body: [UInt8]) {
        self.url = url
        self.body = body
        self.headers = headers + [("Content-Length", String(body.count))]
    }

    func header(_ name: String) -> String? {
        headers.first { $0.name.lowercased() == name.lowercased() }?.value
    }
}
