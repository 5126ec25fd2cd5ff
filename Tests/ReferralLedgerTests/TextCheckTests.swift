import LedgerCodec
@testable import ReferralRules
import XCTest

/// The byte-level fast paths of the text checks answer as their Unicode definitions do (the
/// Character- and scalar-based forms, written out here), for ASCII and for what is not.
final class TextCheckTests: XCTestCase {
    static let samples = [
        "", " ", "a", "friend-12345", " code ", "\tCODE\n", "\r\nX\r\n", "ab c", "\u{A0}code\u{A0}", "\u{2003}", "\u{2028}x",
        "é", "e\u{301}", "x\u{301}", "\u{600}a", "a\u{600}", "level_up", "paid.purchase-2", "level up", "ℌ", "٣", "𝟙", "A_Z.09-",
        "\u{85}", "x\u{85}", "🙂", "café", String(repeating: "a", count: 128), String(repeating: "a", count: 129),
    ]

    func testTrimmingSpacesIsTheCharacterDefinition() {
        func reference(_ text: String) -> String {
            var s = Substring(text)
            while let f = s.first, f.isWhitespace { s = s.dropFirst() }
            while let l = s.last, l.isWhitespace { s = s.dropLast() }
            return String(s)
        }
        for text in Self.samples {
            XCTAssertTrue(text.trimmingSpaces().utf8.elementsEqual(reference(text).utf8), text.debugDescription)
        }
        XCTAssertEqual(" \u{A0}AB CD\u{2003}\n".trimmingSpaces(), "AB CD")
    }

    func testNormalisedCodesAreTrimmedAndUpperCased() {
        for text in Self.samples + ["ABC123", "REF-K3J9", "ref-k3j9", "Abc", "ABC ", " ABC", "ÉCOLE", "école", "ß", "ABC\u{301}", "ﬁ"] {
            XCTAssertTrue(InviteCodes.normalize(text).utf8.elementsEqual(text.trimmingSpaces().uppercased().utf8), text.debugDescription)
        }
        XCTAssertEqual(InviteCodes.normalize(" ref-k3j9 "), "REF-K3J9")
    }

    func testBlankAndEventNameChecksAreTheirUnicodeDefinitions() {
        for text in Self.samples {
            let blank = !text.isEmpty && text.unicodeScalars.allSatisfy(\.properties.isWhitespace)
            XCTAssertEqual((try? FieldReader.checkNotBlank(text, "x")) == nil, blank, text.debugDescription)
            let eventName = text.utf8.count <= 128
                && text.allSatisfy { $0.isASCII && ($0.isLetter || $0.isNumber || $0 == "_" || $0 == "." || $0 == "-") }
            XCTAssertEqual((try? ProgramConfig.checkEventName(text, "x")) != nil, eventName, text.debugDescription)
        }
    }

    func testIdentifierCheckIsItsScalarDefinition() {
        let controls = ["a\u{0}b", "tab\there", "del\u{7F}", "nel\u{85}", "c1\u{9F}", "line\u{2028}", "para\u{2029}", "\r\n", "\u{1F}"]
        for text in Self.samples + controls {
            let refused = text.utf8.count > 128 || text.unicodeScalars.contains(where: FieldReader.isControl)
            XCTAssertEqual((try? FieldReader.checkIdentifier(text, "command.user")) == nil, refused, text.debugDescription)
        }
        XCTAssertThrowsError(try FieldReader.checkIdentifier("a\u{7F}", "command.user")) { error in
            XCTAssertTrue("\(error)".contains("command.user must not contain control characters"), "\(error)")
        }
    }
}
