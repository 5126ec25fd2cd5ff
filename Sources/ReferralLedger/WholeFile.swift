import Foundation

/// A file written whole or not at all: its bytes go to `PATH.partial-PID` beside it, are synced,
/// and the file is renamed over `PATH`; then its folder is synced, so the rename outlives a crash.
/// A full disk or a kill leaves the old file (or none), never a shorter one. Used for the writer's
/// state snapshot and for the CLI's `export --out` and `checkpoint --out`.
package enum WholeFile {
    /// What a partial file's name adds to the name of the file it becomes, before the writer's PID.
    package static let partialSuffix = ".partial-"

    /// Where the writer of `path` in this process puts its bytes until they are whole.
    package static func partialPath(of path: String) -> String { path + partialSuffix + String(getpid()) }

    /// Writes `path` whole, and returns what `body` returns: `body` writes into the partial file's descriptor (created with
    /// `permissions` before `body` runs, so an unwritable folder is known before any work). On any
    /// failure the partial file is removed and the error thrown: `body`'s own, or what `failure`
    /// makes of the step that failed (`create`, `sync`, `rename`), while `errno` still says why.
    @discardableResult
    package static func write<Result>(_ path: String, permissions: mode_t, failure: (_ step: String) -> Error,
                                      _ body: (_ fd: Int32) throws -> Result) throws -> Result {
        let partial = partialPath(of: path)
        let fd = open(partial, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, permissions)
        guard fd >= 0 else { throw failure("create") }
        let result: Result
        do {
            defer { close(fd) }
            result = try body(fd)
            guard fsync(fd) == 0 else { throw failure("sync") }
        } catch {
            unlink(partial)
            throw error
        }
        guard rename(partial, path) == 0 else {
            let error = failure("rename")
            unlink(partial)
            throw error
        }
        let folder = open(parent(of: path), O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if folder >= 0 { _ = fsync(folder); close(folder) }
        return result
    }

    /// Writes all of `bytes` to `fd`, again after an interruption; false (with `errno` set) on an error.
    package static func writeAll(_ bytes: [UInt8], to fd: Int32) -> Bool {
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { Foundation.write(fd, $0.baseAddress! + done, bytes.count - done) }
            if n < 0 {
                if errno == EINTR { continue }
                return false
            }
            done += n
        }
        return true
    }

    /// The folder holding `path`: `.` for a bare name, `/` at the root.
    static func parent(of path: String) -> String { split(path).parent }

    /// A path's folder (`.` for a bare name, `/` at the root) and last component. Split by hand:
    /// Foundation's NSString path methods trap on some inputs, "-" among them.
    package static func split(_ path: String) -> (parent: String, name: String) {
        guard let slash = path.lastIndex(of: "/") else { return (".", path) }
        return (slash == path.startIndex ? "/" : String(path[..<slash]), String(path[path.index(after: slash)...]))
    }
}
