import CJemalloc

/// The allocator of this executable: jemalloc, linked in place of glibc's malloc (the ledger's
/// work is many small, short-lived values made on one thread and freed on another; see
/// docs/decisions.md). `status` names it.
enum Allocator {
    /// `jemalloc VERSION`, read from jemalloc itself (`mallctl("version")`): it answers only when
    /// jemalloc is the malloc in use.
    static var description: String {
        var version: UnsafePointer<CChar>?
        var size = MemoryLayout<UnsafePointer<CChar>?>.size
        guard mallctl("version", &version, &size, nil, 0) == 0, let version else { return "unknown" }
        return "jemalloc " + String(cString: version)
    }
}
