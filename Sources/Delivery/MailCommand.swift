import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// Runs the operator's sendmail-compatible command with `/bin/sh -c`, the message on stdin,
/// and waits for it without holding a thread: exit status 0 is success; a non-zero status,
/// a signal, a spawn failure or the timeout is a failure with a text saying which (and the
/// start of what the command wrote to stderr).
///
/// The child is spawned with `posix_spawn` rather than Foundation's `Process`, because a
/// `Process` started from a Swift-concurrency or Dispatch thread inherits that thread's
/// signal mask (almost every signal blocked) and the worker's ignored SIGPIPE: the mail
/// command would then ignore the SIGTERM of the timeout. Here the child gets an empty mask,
/// default signal actions, its own process group (so the timeout stops its children too),
/// stdin from the whole message already written to an unlinked temporary file (so a worker killed
/// at any moment never leaves the command reading half a message, or none), stdout to /dev/null,
/// stderr to a pipe, and no other descriptors.
enum MailCommand {
    static func run(_ command: String, input: [UInt8], timeout: Double) async -> String? {
        let message: Int32
        switch messageFile(input) {
        case .success(let fd): message = fd
        case .failure(let reason): return "the mail command could not be started: the message could not be written to a temporary file: \(reason)"
        }
        var errPipe: [Int32] = [-1, -1]
        guard pipe(&errPipe) == 0 else {
            close(message)
            return "the mail command could not be started: \(lastError())"
        }
        for fd in errPipe { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var pid: pid_t = 0
        let spawnError = spawn(command, stdin: message, stderr: errPipe[1], pid: &pid)
        close(message)
        close(errPipe[1])
        guard spawnError == 0 else {
            close(errPipe[0])
            return "the mail command could not be started: \(String(cString: strerror(spawnError)))"
        }
        defer { close(errPipe[0]) }
        // Its stderr is read as it comes (the start kept, the rest let go), so a command that writes
        // more than a pipe holds is never stopped waiting for room and reported as timed out.
        _ = fcntl(errPipe[0], F_SETFL, fcntl(errPipe[0], F_GETFL) | O_NONBLOCK)
        var said: [UInt8] = []

        // Poll for the exit (no thread blocked in waitpid); on timeout TERM the group, then KILL.
        let started = DispatchTime.now().uptimeNanoseconds
        let limit = UInt64(max(0, timeout) * 1e9)
        var terminatedAt: UInt64?
        var status: Int32 = 0
        while true {
            drain(errPipe[0], into: &said)
            let r = waitpid(pid, &status, WNOHANG)
            if r == pid { break }
            if r < 0, errno != EINTR { return "could not learn how the mail command ended: \(lastError())" }
            let elapsed = DispatchTime.now().uptimeNanoseconds - started
            if terminatedAt == nil, elapsed >= limit {
                terminatedAt = elapsed
                kill(-pid, SIGTERM)
                kill(pid, SIGTERM)
            } else if let t = terminatedAt, elapsed - t >= 2_000_000_000 {
                kill(-pid, SIGKILL)
                kill(pid, SIGKILL)
            }
            await pause(milliseconds: 20)
        }

        if terminatedAt != nil {
            return "the mail command did not finish within \(DeliveryHTTPClient.seconds(timeout)) s and was stopped"
        }
        let exited = status & 0x7F == 0
        let code = exited ? (status >> 8) & 0xFF : status & 0x7F
        if exited, code == 0 { return nil }
        var text = exited ? "the mail command exited with status \(code)" : "the mail command was killed by signal \(code)"
        drain(errPipe[0], into: &said)
        let lines = errorText(said)
        if !lines.isEmpty { text += ": " + lines }
        return text
    }

    /// `posix_spawn` of `/bin/sh -c COMMAND` with the descriptors and signal state described above.
    /// Answers 0 or the error number.
    static func spawn(_ command: String, stdin: Int32, stderr: Int32, pid: inout pid_t) -> Int32 {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_adddup2(&actions, stdin, 0)
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0)
        posix_spawn_file_actions_adddup2(&actions, stderr, 2)
        if let closeFrom = addCloseFrom { _ = closeFrom(&actions, 3) }

        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var none = sigset_t()
        sigemptyset(&none)
        posix_spawnattr_setsigmask(&attributes, &none)
        var all = sigset_t()
        sigfillset(&all)
        sigdelset(&all, SIGKILL)
        sigdelset(&all, SIGSTOP)
        posix_spawnattr_setsigdefault(&attributes, &all)
        posix_spawnattr_setpgroup(&attributes, 0)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP))

        let argv: [UnsafeMutablePointer<CChar>?] = [strdup("/bin/sh"), strdup("-c"), strdup(command), nil]
        defer { argv.forEach { free($0) } }
        return posix_spawn(&pid, "/bin/sh", &actions, &attributes, argv, environ)
    }

    /// glibc's `posix_spawn_file_actions_addclosefrom_np` (2.34+), looked up at run time because
    /// the Glibc module does not declare it; without it the child keeps the worker's descriptors
    /// that lack close-on-exec.
    static let addCloseFrom: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32)? = {
        guard let symbol = dlsym(nil, "posix_spawn_file_actions_addclosefrom_np") else { return nil }
        return unsafeBitCast(symbol, to: (@convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32).self)
    }()

    /// Sleeps without being cut short by task cancellation (the child must still be reaped).
    static func pause(milliseconds: Int) async {
        await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
            DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(milliseconds)) { c.resume() }
        }
    }

    /// The message in a temporary file already unlinked (readable only through the descriptor,
    /// gone when the last one closes), positioned at its start, close-on-exec.
    static func messageFile(_ bytes: [UInt8]) -> Result<Int32, MessageFileError> {
        var template = Array((NSTemporaryDirectory() + "/referral-ledger-mail-XXXXXX").utf8CString)
        let fd = template.withUnsafeMutableBufferPointer { mkstemp($0.baseAddress!) }
        guard fd >= 0 else { return .failure(MessageFileError(reason: lastError())) }
        _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
        template.withUnsafeBufferPointer { _ = unlink($0.baseAddress!) }
        var offset = 0
        while offset < bytes.count {
            let n = bytes[offset...].withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            if n > 0 { offset += n } else if n < 0, errno == EINTR { continue } else {
                let reason = n < 0 ? lastError() : "nothing written"
                close(fd)
                return .failure(MessageFileError(reason: reason))
            }
        }
        guard lseek(fd, 0, SEEK_SET) == 0 else {
            let reason = lastError()
            close(fd)
            return .failure(MessageFileError(reason: reason))
        }
        return .success(fd)
    }

    struct MessageFileError: Error, CustomStringConvertible {
        var reason: String
        var description: String { reason }
    }

    /// The most of the command's stderr kept for the report.
    static let keptErrorBytes = 1000

    /// Reads what the (non-blocking) stderr pipe holds now: the first `keptErrorBytes` are kept in
    /// `kept`, the rest read and let go.
    static func drain(_ fd: Int32, into kept: inout [UInt8]) {
        var buffer = [UInt8](repeating: 0, count: 16_384)
        while true {
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { return }
            kept += buffer.prefix(min(n, max(0, keptErrorBytes - kept.count)))
        }
    }

    /// The kept stderr as one line: its non-empty lines joined by "; ".
    static func errorText(_ bytes: [UInt8]) -> String {
        String(decoding: bytes, as: UTF8.self).split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
            .filter { !$0.isEmpty }.joined(separator: "; ")
    }

    static func lastError() -> String { String(cString: strerror(errno)) }

    /// Ignores SIGPIPE once per process, so a mail command that exits without reading its
    /// input cannot kill the worker (the child gets the default action back).
    static let ignoreBrokenPipes: Void = { _ = signal(SIGPIPE, SIG_IGN) }()
}
