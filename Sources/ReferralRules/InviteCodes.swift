import LedgerCodec

/// Invite code text: the alphabet, the code formats (SPEC §13 "Code formats": random, prefixed,
/// username; §5) and normalisation.
public enum InviteCodes {
    /// No 0/O, 1/I/L: nothing a person can misread.
    public static let alphabet: [Character] = Array("ABCDEFGHJKLMNPQRSTUVWXYZ23456789")

    /// Codes match case-insensitively with surrounding spaces ignored.
    public static func normalize(_ code: String) -> String {
        // Most codes are ASCII with no lower-case letter and nothing to trim: already normal.
        if let first = code.utf8.first, let last = code.utf8.last, first.isASCIIAndNotWhiteSpace, last.isASCIIAndNotWhiteSpace,
           code.utf8.allSatisfy({ $0 < 0x80 && !(0x61...0x7A).contains($0) }) {
            return code
        }
        return code.trimmingSpaces().uppercased()
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
            let head = usernameStem(user) + "-"
            return code.hasPrefix(head) && drawn(code.dropFirst(head.count), usernameDrawnLength)
        }
    }

    /// The user part of a username code (SPEC §13): the user ID lowercased, then its ASCII letters
    /// and digits only (by Unicode scalar: "İSTANBUL" lowercases to "i̇stanbul", whose "i" stays),
    /// cut to 10 characters.
    static func usernameBase(_ user: String) -> String {
        var out = ""
        for scalar in user.lowercased().unicodeScalars where scalar.isASCII && (("a"..."z").contains(scalar) || ("0"..."9").contains(scalar)) {
            out.unicodeScalars.append(scalar)
            if out.unicodeScalars.count == 10 { break }
        }
        return out
    }

    /// A username code's part before its `-`: `usernameBase`, or `friend` for a user ID with no
    /// ASCII letters or digits.
    static func usernameStem(_ user: String) -> String {
        let base = usernameBase(user)
        return base.isEmpty ? "friend" : base
    }

    /// The characters drawn after a username code's stem (its `length` does not apply).
    static let usernameDrawnLength = 4

    /// A fresh code in the program's format; `random(n)` draws an index below n.
    public static func make(_ config: ProgramConfig.InviteConfig, user: String, random: (Int) -> Int) -> String {
        func draw(_ n: Int) -> String { String((0..<n).map { _ in alphabet[random(alphabet.count)] }) }
        switch config.format {
        case .random: return draw(config.length)
        case .prefixed: return (config.prefix ?? "REF") + "-" + draw(config.length)
        case .username: return usernameStem(user) + "-" + draw(usernameDrawnLength)
        }
    }
}

extension String {
    func trimmingSpaces() -> String {
        // Most texts start and end with an ASCII byte that is not white space: nothing to trim
        // (no Character is made to ask).
        if let first = utf8.first, let last = utf8.last, first.isASCIIAndNotWhiteSpace, last.isASCIIAndNotWhiteSpace { return self }
        var s = Substring(self)
        while let f = s.first, f.isWhitespace { s = s.dropFirst() }
        while let l = s.last, l.isWhitespace { s = s.dropLast() }
        return String(s)
    }
}

extension UInt8 {
    /// An ASCII byte that is not Unicode white space (U+0009–U+000D, U+0020).
    var isASCIIAndNotWhiteSpace: Bool { self < 0x80 && self != 0x20 && !(0x09...0x0D).contains(self) }
}
