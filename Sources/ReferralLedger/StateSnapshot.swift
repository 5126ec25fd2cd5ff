import Foundation
import LedgerCodec
import LedgerStore
import ReferralRules

/// The writer's decision state saved at a position of the log, so that opening a long ledger
/// loads it and folds only the events after it, instead of the whole log. A shortcut only: the
/// log stays the one source (`verify`, `rebuild` and as-of queries never read a snapshot), and a
/// snapshot that cannot be trusted is passed over for a full fold, never an error.
///
/// Kept in the data folder beside the LMDB files, as `state.snapshot`: a first line of JSON
/// (format, build, position, hash, bytes, sha256), then the state's bytes
/// (`LedgerState.snapshotBytes`). Outside LMDB, so storing a hundred megabytes neither holds the
/// write lock nor churns the map's pages (which a long reader, a `verify`, would pin). Written to a
/// temporary file, synced, then renamed into place. Trusted only when written by this very build
/// (the SHA-256 of the running executable: another build may fold events otherwise), of this
/// format, whole (its size and SHA-256), and at a position whose event in the log still has the
/// hash it names.
enum StateSnapshot {
    static let fileName = "state.snapshot"
    /// Files being written (`state.snapshot.partial-PID`); left by a killed save, removed by the next.
    static let partialPrefix = fileName + WholeFile.partialSuffix
    /// The first line's longest length.
    private static let maxHeader = 4096

    struct Meta: Equatable {
        var format: UInt64
        var build: String
        var position: UInt64
        var hash: String
        var bytes: Int
        var sha256: String

        var json: JSONValue {
            ["format": .int(Int64(format)), "build": .string(build), "position": .int(Int64(position)), "hash": .string(hash),
             "bytes": .int(Int64(bytes)), "sha256": .string(sha256)]
        }

        init(format: UInt64, build: String, position: UInt64, hash: String, bytes: Int, sha256: String) {
            (self.format, self.build, self.position, self.hash, self.bytes, self.sha256) = (format, build, position, hash, bytes, sha256)
        }

        init?(json: JSONValue) {
            guard let format = json["format"].intValue, let build = json["build"].stringValue, let position = json["position"].intValue,
                  let hash = json["hash"].stringValue, let bytes = json["bytes"].intValue, let sha256 = json["sha256"].stringValue,
                  format >= 0, position >= 0, bytes >= 0 else { return nil }
            self.init(format: UInt64(format), build: build, position: UInt64(position), hash: hash, bytes: Int(bytes), sha256: sha256)
        }
    }

    /// What identifies the running build: the SHA-256 of its executable (nil where it cannot be
    /// read: then no snapshot is saved or loaded). Hashed the first time it is asked for.
    static let build: String? = {
        guard let data = FileManager.default.contents(atPath: "/proc/self/exe"), !data.isEmpty else { return nil }
        return data.withUnsafeBytes { SHA256.hex($0) }
    }()

    static func path(_ folder: String) -> String { folder + "/" + fileName }

    /// Opens the snapshot file for reading when it is a regular file (a FIFO or a device of that
    /// name must not hang an open: O_NONBLOCK, then a look at what it is).
    private static func openFile(_ folder: String) -> Int32? {
        let fd = open(path(folder), O_RDONLY | O_CLOEXEC | O_NONBLOCK)
        guard fd >= 0 else { return nil }
        var info = stat()
        guard fstat(fd, &info) == 0, info.st_mode & S_IFMT == S_IFREG else {
            close(fd)
            return nil
        }
        return fd
    }

    /// The snapshot's meta (of any build), read from the first line of its file; nil without one.
    static func meta(folder: String) -> Meta? {
        guard let fd = openFile(folder) else { return nil }
        defer { close(fd) }
        guard let (meta, _) = header(fd) else { return nil }
        return meta
    }

    /// The meta line at the start of `fd`, and the offset of the bytes after it.
    private static func header(_ fd: Int32) -> (Meta, Int)? {
        var head = [UInt8](repeating: 0, count: maxHeader)
        let n = head.withUnsafeMutableBytes { pread(fd, $0.baseAddress, maxHeader, 0) }
        guard n > 0, let newline = head[..<n].firstIndex(of: 0x0A),
              let json = try? JSONParser.parse(head[..<newline]), let meta = Meta(json: json) else { return nil }
        return (meta, newline + 1)
    }

    /// The bytes of the state saved by this build, if the file is there, of this format and build,
    /// of the size and SHA-256 its meta names. (Whether its position still names an event of the
    /// log is `names(_:_:)`; the build is hashed only when there is a snapshot to compare.)
    static func read(folder: String) -> (bytes: [UInt8], meta: Meta)? {
        guard let file = OpenFile(folder: folder) else { return nil }
        let meta = file.meta
        // (The size was checked against the file's before anything is allocated.)
        let bytes = [UInt8](unsafeUninitializedCapacity: meta.bytes) { buffer, count in
            count = file.read(into: UnsafeMutableRawBufferPointer(buffer), at: 0)
        }
        guard bytes.count == meta.bytes, SHA256.hex(bytes) == meta.sha256 else { return nil }
        return (bytes, meta)
    }

    /// A snapshot file of this format and build held open (a save that replaces the file meanwhile
    /// does not change what is read from it), its size checked against its meta; its bytes are not
    /// read yet, nor their SHA-256 checked.
    final class OpenFile {
        let meta: Meta
        private let fd: Int32
        /// Where the state's bytes start (after the meta line).
        private let offset: Int

        init?(folder: String) {
            guard let fd = StateSnapshot.openFile(folder) else { return nil }
            var info = stat()
            guard fstat(fd, &info) == 0, let (meta, offset) = header(fd), meta.format == LedgerState.snapshotFormat,
                  meta.position > 0, Int(info.st_size) - offset == meta.bytes, meta.build == build else {
                close(fd)
                return nil
            }
            (self.fd, self.meta, self.offset) = (fd, meta, offset)
        }

        deinit { close(fd) }

        /// Reads the state's bytes from `start` into `buffer` (as many as fit, up to the end);
        /// answers how many were read (fewer only at the end or on an error).
        func read(into buffer: UnsafeMutableRawBufferPointer, at start: Int) -> Int {
            let wanted = min(buffer.count, meta.bytes - start)
            var count = 0
            while count < wanted {
                let n = pread(fd, buffer.baseAddress! + count, wanted - count, off_t(offset + start + count))
                if n <= 0 { if n < 0 && errno == EINTR { continue }; break }
                count += n
            }
            return count
        }
    }

    /// Writes an open snapshot as `folder`'s snapshot, `chunkSize` bytes at a time (memory stays
    /// bounded whatever the state's size), checking its SHA-256 as it goes; answers whether it was
    /// written whole and matching (else nothing is left in `folder`).
    static func copy(_ file: OpenFile, to folder: String, chunkSize: Int = 1 << 20) -> Bool {
        struct Unreadable: Error {}
        let meta = file.meta
        return (try? WholeFile.write(path(folder), permissions: 0o600, failure: { _ in Unreadable() }) { fd in
            guard WholeFile.writeAll(meta.json.bytes + [0x0A], to: fd) else { throw Unreadable() }
            let hasher = SHA256.Hasher()
            var chunk = [UInt8](repeating: 0, count: min(chunkSize, max(meta.bytes, 1)))
            var done = 0
            while done < meta.bytes {
                let n = chunk.withUnsafeMutableBytes { file.read(into: $0, at: done) }
                guard n > 0 else { throw Unreadable() }
                chunk.withUnsafeBytes { hasher.update(UnsafeRawBufferPointer(rebasing: $0[..<n])) }
                guard WholeFile.writeAll(Array(chunk[..<n]), to: fd) else { throw Unreadable() }
                done += n
            }
            guard hasher.finalHex() == meta.sha256 else { throw Unreadable() }
            return true
        }) == true
    }

    /// Whether the event at the snapshot's position is in the log with the hash the snapshot names.
    static func names(_ meta: Meta, _ txn: LMDBTransaction) throws -> Bool {
        guard let event = try txn.get(EventLog.eventsDatabase, EventLog.key(meta.position)) else { return false }
        return SHA256.hex(event) == meta.hash
    }

    /// The state in snapshot bytes, and the head it was taken at; nil when they do not read back.
    static func state(from bytes: [UInt8], _ meta: Meta) -> (LedgerState, ChainHead)? {
        guard let state = try? LedgerState(snapshot: bytes), state.head == meta.position else { return nil }
        return (state, ChainHead(position: meta.position, hash: meta.hash))
    }

    /// Replaces the folder's snapshot with a state's bytes (`LedgerState.snapshotBytes`, made by
    /// `encode` once the file could be created), taken at `head`: written to a temporary file,
    /// synced, renamed into place, the folder synced. Only the folder's writer saves, one save at a
    /// time: partial files left by a killed save go first.
    static func save(at head: ChainHead, build: String, folder: String, encode: () -> [UInt8]) throws -> Meta {
        removePartials(folder: folder)
        let file = path(folder)
        func failure(_ what: String) -> LedgerError {
            LedgerError(code: "snapshot_not_saved", message: "cannot \(what) \(WholeFile.partialPath(of: file)): \(String(cString: strerror(errno)))")
        }
        return try WholeFile.write(file, permissions: 0o600, failure: failure) { fd in
            let bytes = encode()
            let meta = Meta(format: LedgerState.snapshotFormat, build: build, position: head.position, hash: head.hash,
                            bytes: bytes.count, sha256: SHA256.hex(bytes))
            for part in [meta.json.bytes + [0x0A], bytes] {
                guard WholeFile.writeAll(part, to: fd) else { throw failure("write") }
            }
            return meta
        }
    }

    /// Removes the folder's snapshot (`rebuild` starts from the log alone).
    static func remove(folder: String) {
        unlink(path(folder))
        removePartials(folder: folder)
    }

    private static func removePartials(folder: String) {
        for name in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] where name.hasPrefix(partialPrefix) {
            unlink(folder + "/" + name)
        }
    }
}
