import Foundation
import LedgerCodec
import LedgerStore

/// What an operator looks at before acting: the head, whether the projections are at it, how
/// full the map is, whether a writer holds the folder, and how many entries each database has.
extension Ledger {
    /// `{"folder", "head_position", "head_hash", "projections": {"state", "checkpoint", "schema",
    /// "code_schema"}, "writer_running", "file_bytes", "map_bytes", "used_bytes", "entries": {...}}`.
    /// `projections.state` is `current` (at the head, this code's schema), `missing`, `rebuilding`
    /// (a rebuild is under way, or was cut short), `other_schema` or `behind`: each but `current`
    /// is put right by the next writer's open, or by `rebuild`.
    public func status() throws -> JSONValue {
        let (head, checkpoint, entries) = try environment.read { txn in
            var entries: [String: JSONValue] = [:]
            for name in Self.databases { entries[name] = .int(Int64(try txn.count(name))) }
            return (try EventLog.head(txn), try ProjectionStore.checkpoint(txn), entries)
        }
        let snapshot = StateSnapshot.meta(folder: folder)
        let state = ProjectionStore.state(checkpoint, head: head.position)
        var file = stat()
        let fileBytes = stat(folder + "/data.mdb", &file) == 0 ? Int64(file.st_size) : 0
        return [
            "folder": .string(folder),
            "head_position": .int(Int64(head.position)), "head_hash": .string(head.hash),
            "projections": ["state": .string(state), "checkpoint": .optional(checkpoint.map { Int($0.position) }),
                            "schema": checkpoint.map { Self.versions($0.schema) } ?? .null, "code_schema": Self.versions(ProjectionStore.schemaVersion)],
            "writer_running": .bool(!isReadOnly || WriterLock.isHeld(folder: folder)),
            "file_bytes": .int(fileBytes), "map_bytes": .int(Int64(environment.mapSize)), "used_bytes": .int(Int64(environment.usedBytes)),
            "entries": .object(entries),
            // The writer's state snapshot (an open loads it when its build wrote it).
            "state_snapshot": snapshot.map { ["position": .int(Int64($0.position)), "bytes": .int(Int64($0.bytes)),
                                              "this_build": .bool($0.build == StateSnapshot.build)] } ?? .null,
        ]
    }

    /// Projection schema versions (stored as a JSON object of versions by projection), as JSON.
    private static func versions(_ schema: String) -> JSONValue {
        (try? JSONValue(parsing: Array(schema.utf8))) ?? .string(schema)
    }
}
