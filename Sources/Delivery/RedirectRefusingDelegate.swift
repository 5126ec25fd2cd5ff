import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Synchronization

/// The URLSession delegate of the worker's client: refuses every redirect (a 3xx answer is
/// the outcome of the call, a failure), keeps the status and the first bytes of each answer,
/// and resumes the caller when the task completes.
final class RedirectRefusingDelegate: NSObject, URLSessionDataDelegate, @unchecked Sendable {
    /// What came back: a status (when an answer arrived), its first bytes, or the error.
    struct Answer: Sendable {
        var status: Int?
        var body: [UInt8] = []
        var error: URLError?
        var errorText: String?
    }

    private struct Pending {
        var continuation: CheckedContinuation<Answer, Never>
        var answer = Answer()
    }

    /// Bytes of an answer's body kept for the error text; the rest is dropped as it arrives.
    static let keptBodyBytes = 512

    // `@unchecked Sendable`: this is the only mutable state, behind the mutex.
    private let pending = Mutex<[Int: Pending]>([:])

    func register(_ task: URLSessionTask, _ continuation: CheckedContinuation<Answer, Never>) {
        pending.withLock { $0[task.taskIdentifier] = Pending(continuation: continuation) }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, willPerformHTTPRedirection response: HTTPURLResponse,
                    newRequest request: URLRequest, completionHandler: @escaping @Sendable (URLRequest?) -> Void) {
        completionHandler(nil)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive response: URLResponse,
                    completionHandler: @escaping @Sendable (URLSession.ResponseDisposition) -> Void) {
        let status = (response as? HTTPURLResponse)?.statusCode
        pending.withLock { $0[dataTask.taskIdentifier]?.answer.status = status }
        completionHandler(.allow)
    }

    func urlSession(_ session: URLSession, dataTask: URLSessionDataTask, didReceive data: Data) {
        pending.withLock { all in
            guard var p = all[dataTask.taskIdentifier] else { return }
            let room = Self.keptBodyBytes - p.answer.body.count
            if room > 0 {
                p.answer.body += data.prefix(room)
                all[dataTask.taskIdentifier] = p
            }
        }
    }

    func urlSession(_ session: URLSession, task: URLSessionTask, didCompleteWithError error: Error?) {
        let finished: Pending? = pending.withLock { $0.removeValue(forKey: task.taskIdentifier) }
        guard var p = finished else { return }
        if p.answer.status == nil, let status = (task.response as? HTTPURLResponse)?.statusCode { p.answer.status = status }
        if let error {
            p.answer.error = error as? URLError
            p.answer.errorText = error.localizedDescription
        }
        p.continuation.resume(returning: p.answer)
    }
}
