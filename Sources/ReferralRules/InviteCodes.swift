import LedgerCodec

/// Invite code text: the alphabet, formats (SPEC §5, §13) and normalisation.
public enum InviteCodes {
    /// No 0/O, 1/I/L: nothing a person can misread.
    public static let alphabet: [Character] = Array("ABCDEFGHJKLMNPQRSTUVWXYZ23456789")

    /// Codes match case-insensitively with surrounding spaces ignored.
    public static func normalize(_ code: String) -> String {
        code.trimmingSpaces().uppercased()
    }

    /// Whether `code` is one `make` could have drawn for `user` under `config`.
    public static func fits(_ code: String, _ config: ProgramConfig.InviteConfig, user: String) -> Bool {
        func drawn(_ part: Substring, _ n: Int) -> Bool { part.count == n && part.allSatisfy(alphabet.contains) }
        switch config.format {
        case .random:
            return drawn(Substring(code), config.length)
        case .prefixed:
            let head = (config.prefix ?? "REF") + "-"
            return code.hasPrefix(head) && drawn(code.dropFirst(head.count), config.length)
        case .username:
            let base = String(user.lowercased().filter { $0.isASCII && ($0.isLetter || $0.isNumber) }.prefix(10))
            let head = (base.isEmpty ? "friend" : base) + "-"
            return code.hasPrefix(head) && drawn(code.dropFirst(head.count), 4)
        }
    }

    /// A fresh code in the program's format; `random(n)` draws an index below n.
    public static func make(_ config: ProgramConfig.InviteConfig, user: String, random: (Int) -> Int) -> String {
        func draw(_ n: Int) -> String { String((0..<n).map { _ in alphabet[random(alphabet.count)] }) }
        switch config.format {
        case .random: return draw(config.length)
        case .prefixed: return (config.prefix ?? "REF") + "-" + draw(config.length)
        case .username:
            let base = String(user.lowercased().filter { $0.isASCII && ($0.isLetter || $0.isNumber) }.prefix(10))
            return (base.isEmpty ? "friend" : base) + "-" + draw(4)
        }
    }
}

extension String {
    func trimmingSpaces() -> String {
        var s = Substring(self)
        while let f = s.first, f.isWhitespace { s = s.dropFirst() }
        while let l = s.last, l.isWhitespace { s = s.dropLast() }
        return String(s)
    }
}
