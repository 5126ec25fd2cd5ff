// The standard library's own normalizer: the one `String ==` and hashing use.
@_spi(_Unicode) import Swift

extension Ledger {
    /// Whether `text` is in Unicode normalization form C (ASCII always is), as the Swift standard
    /// library normalizes: the form its `==` compares. Foundation's normalizer can lag behind it
    /// (combining marks added in Unicode 16 are left unordered there), and two spellings it
    /// passed would be one user to the rules and two to every byte-keyed index.
    static func isNFC(_ text: String) -> Bool {
        text.utf8.allSatisfy { $0 < 0x80 } || text.utf8.elementsEqual(text._nfcCodeUnits)
    }
}
