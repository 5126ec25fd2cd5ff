import Foundation
import LedgerCodec
import LedgerStore
import ReferralRules

/// The writer's decision state saved at a position of the log, so that opening a long ledger
/// loads it and folds only the events after it, instead of the whole log. A shortcut only: the
/// log stays the one source (`verify` and `rebuild` never read a snapshot), and a snapshot that
/// cannot be trusted is passed over for a full fold, never an error.
///
/// Kept in the `state_snapshot` database: `meta` (JSON: format, build, position, hash, bytes,
/// sha256, chunks) and the state's bytes (`LedgerState.snapshotBytes`) in chunks of 1 MiB under
/// `chunk` + a 4-byte big-endian index. Trusted only when written by this very build (the SHA-256
/// of the running executable: another build's fold may read events otherwise), of this format,
/// whole (its SHA-256), and at a position whose event still hashes to the hash it names.
enum StateSnapshot {
    static let database = "state_snapshot"
    static let chunkSize = 1 << 20
    struct Meta: Equatable {
        var format: UInt64
        var build: String
        var position: UInt64
        var hash: String
        var bytes: Int
        var sha256: String
        var chunks: Int

        var json: JSONValue {
            ["format": .int(Int64(format)), "build": .string(build), "position": .int(Int64(position)), "hash": .string(hash),
             "bytes": .int(Int64(bytes)), "sha256": .string(sha256), "chunks": .int(Int64(chunks))]
        }

        init(format: UInt64, build: String, position: UInt64, hash: String, bytes: Int, sha256: String, chunks: Int) {
            (self.format, self.build, self.position, self.hash, self.bytes, self.sha256, self.chunks) = (format, build, position, hash, bytes, sha256, chunks)
        }

        init?(json: JSONValue) {
            guard let format = json["format"].intValue, let build = json["build"].stringValue, let position = json["position"].intValue,
                  let hash = json["hash"].stringValue, let bytes = json["bytes"].intValue, let sha256 = json["sha256"].stringValue,
                  let chunks = json["chunks"].intValue, format >= 0, position >= 0, bytes >= 0, chunks >= 0 else { return nil }
            self.init(format: UInt64(format), build: build, position: UInt64(position), hash: hash, bytes: Int(bytes), sha256: sha256, chunks: Int(chunks))
        }
    }

    /// What identifies the running build: the SHA-256 of its executable (nil where it cannot be
    /// read: then no snapshot is saved or loaded).
    static let build: String? = {
        guard let data = FileManager.default.contents(atPath: "/proc/self/exe"), !data.isEmpty else { return nil }
        return data.withUnsafeBytes { SHA256.hex($0) }
    }()

    static func chunkKey(_ index: Int) -> [UInt8] {
        Array("chunk".utf8) + withUnsafeBytes(of: UInt32(index).bigEndian, Array.init)
    }

    /// The snapshot's meta, if there is one (of any build).
    static func meta(_ txn: LMDBTransaction) throws -> Meta? {
        guard let bytes = try txn.get(database, Array("meta".utf8)),
              let json = try? JSONParser.parse(bytes) else { return nil }
        return Meta(json: json)
    }

    /// Replaces the snapshot with a state's bytes (`LedgerState.snapshotBytes`), taken at `head`.
    static func save(_ bytes: [UInt8], at head: ChainHead, build: String, _ txn: LMDBTransaction) throws -> Meta {
        let chunks = (bytes.count + chunkSize - 1) / chunkSize
        try txn.clear(database)
        for i in 0..<chunks {
            try txn.put(database, chunkKey(i), Array(bytes[(i * chunkSize)..<min(bytes.count, (i + 1) * chunkSize)]))
        }
        let meta = Meta(format: LedgerState.snapshotFormat, build: build, position: head.position, hash: head.hash,
                        bytes: bytes.count, sha256: SHA256.hex(bytes), chunks: chunks)
        try txn.put(database, Array("meta".utf8), meta.json.bytes)
        return meta
    }

    /// The bytes of the state saved by this build, if there is one to trust: whole and of this
    /// format, at a position whose event in the log (read in the same transaction) has the hash it
    /// names. Decoded outside the read transaction (`state(from:)`), which stays short.
    /// (The build is hashed only when there is a snapshot to compare it with.)
    static func read(_ txn: LMDBTransaction) throws -> (bytes: [UInt8], meta: Meta)? {
        guard let meta = try meta(txn), meta.format == LedgerState.snapshotFormat, meta.build == build, meta.position > 0,
              let event = try txn.get(EventLog.eventsDatabase, EventLog.key(meta.position)), SHA256.hex(event) == meta.hash else { return nil }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(meta.bytes)
        for i in 0..<meta.chunks {
            guard let chunk = try txn.get(database, chunkKey(i)) else { return nil }
            bytes.append(contentsOf: chunk)
        }
        return (bytes, meta)
    }

    /// The state in snapshot bytes read by `read`, and the head it was taken at; nil when the bytes
    /// are not what the meta says or do not read back.
    static func state(from bytes: [UInt8], _ meta: Meta) -> (LedgerState, ChainHead)? {
        guard bytes.count == meta.bytes, SHA256.hex(bytes) == meta.sha256,
              let state = try? LedgerState(snapshot: bytes), state.head == meta.position else { return nil }
        return (state, ChainHead(position: meta.position, hash: meta.hash))
    }
}
