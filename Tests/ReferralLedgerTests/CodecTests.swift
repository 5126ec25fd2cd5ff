import Foundation
import LedgerCodec
import ReferralRules
import XCTest

/// The value types every layer speaks: strict JSON, canonical bytes, RFC 3339 times, durations.
final class CodecTests: XCTestCase {
    /// A number that is not a plain 64-bit integer is refused with what it must be, for a field
    /// with no lower bound too (found by reading the fuzzer's harness: `Int64(-1e300)` trapped).
    func testAWholeNumberPast64BitsIsRefusedNotTrapped() throws {
        for (text, why) in [("-1e300", "at least \(Int64.min)"), ("1e300", "at most 1000000000"), ("1e2", "such as 100"),
                            ("2.5", "not a fraction"), ("-3e2", "such as -300")] {
            var fields = try FieldReader(try JSONValue(parsing: #"{"n":"# + text + "}"), context: "command")
            XCTAssertThrowsError(try fields.int("n"), text) { error in
                XCTAssertTrue("\(error)".contains(why), "\(text): \(error)")
            }
        }
        var fields = try FieldReader(try JSONValue(parsing: #"{"n":-7}"#), context: "command")
        XCTAssertEqual(try fields.int("n"), -7)
    }

    func testTheParserIsStrict() {
        for bad in ["", "{", "{\"a\":1,}", "[1 2]", "{'a':1}", "01", "1.", "-", "\"\\x\"", "\"\u{01}\"", "{\"a\":1,\"a\":2}", "tru", "1 2",
                    "\"\\ud800\"", String(repeating: "[", count: 300) + String(repeating: "]", count: 300)] {
            XCTAssertThrowsError(try JSONValue(parsing: bad), "accepted \(bad)")
        }
        XCTAssertEqual(try JSONValue(parsing: " {\"a\" : [1, -2.5e3, true, null, \"é\\n\\u00e9\\ud83d\\ude00\"]} "),
                       ["a": [1, -2500.0, true, nil, "é\né😀"]])
        // Two spellings of one canonical text are two keys (byte-exact), in or out of order.
        for text in ["{\"\\u00e9\":1,\"e\\u0301\":2}", "{\"e\\u0301\":1,\"\\u00e9\":2}"] {
            XCTAssertEqual((try? JSONValue(parsing: text))?.objectValue?.count, 2, text)
        }
        XCTAssertEqual(try JSONValue(parsing: "9223372036854775807"), .int(Int64.max))
        XCTAssertEqual(try JSONValue(parsing: "9223372036854775808"), .double(9223372036854775808))
    }

    /// Objects of every width and depth come out whole and in order, also past the parser's first
    /// stack of members, and a text that fails anywhere inside nested objects is refused with the
    /// place named, the next parse unaffected.
    func testNestedAndWideObjectsParseWholeAndFailuresInsideThemAreNamed() throws {
        let wide = JSONObject((0..<100).map { ("k\($0)", JSONValue.string("v\($0)")) }.reduce(into: [:]) { $0[$1.0] = $1.1 })
        var nested = JSONValue.object(wide)
        for level in 0..<40 { nested = ["level": .int(Int64(level)), "next": nested, "wide": .object(wide)] }
        let text = nested.text
        let parsed = try JSONValue(parsing: text)
        XCTAssertEqual(parsed, nested)
        XCTAssertEqual(parsed.text, text)
        for cut in stride(from: 1, to: text.utf8.count - 1, by: 997) {
            XCTAssertThrowsError(try JSONValue(parsing: Array(text.utf8.prefix(cut))), "a text cut at byte \(cut)")
        }
        let duplicate = #"{"a":{"b":{"c":1,"d":[{"x":1,"y":2,"x":3}]}}}"#
        XCTAssertThrowsError(try JSONValue(parsing: duplicate)) { error in
            XCTAssertEqual((error as? JSONParseError)?.offset, 35, "the second \"x\" is named")
        }
        XCTAssertEqual(try JSONValue(parsing: #"{"z":{"b":2,"a":1},"a":[{"d":4,"c":3}]}"#).text, #"{"a":[{"c":3,"d":4}],"z":{"a":1,"b":2}}"#)
    }

    /// A member left out is skipped over whatever it holds (escaped quotes and backslashes,
    /// brackets inside strings, nesting, scalars of every kind), only at the depth asked, and the
    /// rest of the value is exactly the whole parse without it.
    func testAParseCanLeaveOutAMember() throws {
        let skipped: [String] = [#""a \"quoted\" } ] { [ \\\\ string\\\\""#, #"{"x":[1,{"y":"}"}],"z":"\\\""}"#, #"[[],{},["]"]]"#,
                                 "-12.5e3", "true", "null", "7", #""""#]
        for inner in skipped {
            for spacing in ["", " "] {
                let text = #"{"a":1,"command":"# + spacing + inner + spacing + #","data":{"command":"# + inner + #","keep":[1,"command"]},"z":{"y":{"command":2}}}"#
                let whole = try JSONValue(parsing: text)
                var expected = whole
                var data = expected["data"].objectValue!
                data["command"] = nil
                expected["data"] = .object(data)
                XCTAssertEqual(try JSONParser.parse(Array(text.utf8), omitting: "command", atDepth: 2), expected, text)
                var top = whole.objectValue!
                top["command"] = nil
                XCTAssertEqual(try JSONParser.parse(Array(text.utf8), omitting: "command", atDepth: 1), .object(top), text)
            }
        }
        for bad in [#"{"a":{"command":"unterminated}}"#, #"{"a":{"command":[1,2}}"#, #"{"a":{"command":}}"#, #"{"a":{"command":[1,2]"#] {
            XCTAssertThrowsError(try JSONParser.parse(Array(bad.utf8), omitting: "command", atDepth: 2), bad)
        }
    }

    /// A value prints as its JSON text, in `print` and in string interpolation alike.
    func testAValuePrintsAsItsJSON() throws {
        let value = try JSONValue(parsing: #"{"b":[1,2.5,"x"],"a":null}"#)
        XCTAssertEqual("\(value)", #"{"a":null,"b":[1,2.5,"x"]}"#)
        XCTAssertEqual(String(describing: value), value.text)
    }

    func testTheWriterIsCanonical() throws {
        let value: JSONValue = ["b": 1, "a": ["z": "x\"y\\\u{07}", "é": 2.5, "A": .null], "_": [true, false]]
        XCTAssertEqual(value.text, #"{"_":[true,false],"a":{"A":null,"z":"x\"y\\\u0007","é":2.5},"b":1}"#)
        XCTAssertEqual(try JSONValue(parsing: value.bytes), value)
        XCTAssertEqual(JSONValue.double(3.0).text, "3")
        for i: Int64 in [0, 9, 10, -1, -9, -10, 99, 100, 1_234_567, -987_654_321, .max, .min, .max - 1, .min + 1] {
            XCTAssertEqual(JSONValue.int(i).text, String(i))
            XCTAssertEqual(JSONValue.array([.int(i), .double(Double(i / 1_000_000))]).text, "[\(i),\(i / 1_000_000)]")
        }
        // Times are written as the JSON string of their canonical text, null when absent.
        for t in [Timestamp.earliest, .latest, Timestamp(milliseconds: 0), Timestamp(rfc3339: "2026-03-01T10:00:00.5+02:00")!] {
            var w = JSONWriter()
            w.writeTimestamp(t)
            XCTAssertEqual(String(decoding: w.bytes, as: UTF8.self), JSONValue.string(t.description).text)
        }
        var none = JSONWriter()
        none.writeTimestamp(Timestamp?.none)
        XCTAssertEqual(String(decoding: none.bytes, as: UTF8.self), "null")
    }

    /// Objects keep their members in canonical key order whatever the order they were made in,
    /// small (scanned) and large (searched) alike, and a missing member is nil, not null.
    func testObjectsKeepCanonicalOrder() throws {
        for size in [3, 40] {
            let keys = (0..<size).map { "k\($0 * 7 % size)" + ($0 % 3 == 0 ? "é" : "") }
            var forward = JSONObject(), backward = JSONObject()
            for (n, k) in keys.enumerated() { forward[k] = .int(Int64(n)) }
            for (n, k) in keys.enumerated().reversed() { backward.updateValue(.int(Int64(n)), forKey: k) }
            XCTAssertEqual(forward, backward)
            XCTAssertEqual(forward.keys, keys.sorted { Array($0.utf8).lexicographicallyPrecedes(Array($1.utf8)) })
            for (n, k) in keys.enumerated() { XCTAssertEqual(forward[k], .int(Int64(n)), k) }
            XCTAssertNil(forward["absent"])
            forward["absent"] = .null
            XCTAssertEqual(forward["absent"], .some(.null))
            forward[keys[1]] = nil
            XCTAssertNil(forward[keys[1]])
            XCTAssertEqual(forward.count, size)
            XCTAssertEqual(try JSONValue(parsing: JSONValue.object(forward).bytes), .object(forward))
        }
        let shuffled = try JSONValue(parsing: #"{"b":1,"é":2,"a":{"z":1,"y":2},"B":3}"#)
        XCTAssertEqual(shuffled.text, #"{"B":3,"a":{"y":2,"z":1},"b":1,"é":2}"#)
        XCTAssertThrowsError(try JSONValue(parsing: #"{"b":1,"a":2,"b":3}"#)) { error in
            XCTAssertEqual((error as? JSONParseError)?.offset, 13, "the second \"b\" is named")
        }
    }

    /// A literal is sorted into canonical order whatever order it is written in; a key given
    /// twice keeps its last value (as assigning the members one by one would).
    func testALiteralSortsItsMembersAndKeepsTheLastOfAKeyGivenTwice() {
        let inOrder: JSONObject = ["a": 1, "b": 2, "c": 3]
        XCTAssertEqual(inOrder.keys, ["a", "b", "c"])
        let reversed: JSONObject = ["é": 1, "z": 2, "b": 3, "a_long_key_of_many_bytes": 4, "B": 5]
        XCTAssertEqual(reversed.keys, ["B", "a_long_key_of_many_bytes", "b", "z", "é"])
        XCTAssertEqual(reversed["z"], 2)
        let twice: JSONObject = ["b": 1, "a": 2, "b": 3, "c": 4, "a": 5, "b": 6]
        XCTAssertEqual(twice.keys, ["a", "b", "c"])
        XCTAssertEqual(twice.values, [5, 6, 4])
        var assigned = JSONObject()
        for (k, v) in [("q", 1), ("p", 2), ("q", 3)] { assigned[k] = .int(Int64(v)) }
        XCTAssertEqual(["q": 1, "p": 2, "q": 3] as JSONObject, assigned)
        // Two spellings of one canonical text are two keys (compared by bytes).
        let spellings: JSONObject = ["e\u{301}": 1, "\u{e9}": 2]
        XCTAssertEqual(spellings.count, 2)
    }

    /// The parser's note on the form must agree with writing the value again, for canonical texts
    /// and for every way a text can differ from the writer's (verify relies on it).
    func testTheParserTellsCanonicalTextFromAnyOther() throws {
        func agrees(_ text: String, line: UInt = #line) throws {
            let (value, canonical) = try JSONParser.parseNotingForm(Array(text.utf8))
            let rewritten = value.text == text
            if let canonical { XCTAssertEqual(canonical, rewritten, "form of \(text)", line: line) }
        }
        var canonicalTexts = [#"{"_":[true,false],"a":{"A":null,"z":"x\"y\\\u0007","é":2.5},"b":1}"#, "[]", "{}", "0", "-12", #""\n\r\t\b\f""#,
                              #"{"a":{"b":{"c":[1,{"d":null}]}},"b":"\u001f"}"#, #"{"":1,"a":2,"ab":3,"b":4}"#]
        for n in 0..<200 {
            // Values with keys in random order and strings with characters the writer escapes.
            var object: [String: JSONValue] = [:]
            for k in 0..<(n % 7) { object["k\(k * 7919 % 13)\(String(repeating: "é", count: k % 3))"] = .string("v\(n)\u{0B}\"\(k)") }
            object["n"] = .int(Int64(n) - 100)
            canonicalTexts.append(JSONValue.object(object).text)
        }
        for text in canonicalTexts {
            XCTAssertNotEqual(try JSONParser.parseNotingForm(Array(text.utf8)).canonical, false, text)
            try agrees(text)
        }
        let others = [#"{"b":1,"a":2}"#, #"{"a":1, "b":2}"#, " 1", "[1 ]", #""\/""#, #""\u0041""#, #""\u001F""#, #""\u000a""#, "-0",
                      #""\ud83d\ude00""#, #"{"a":{"d":1,"c":2}}"#, #"{"é":1,"z":2}"#, "1.0", "1e2", "2.5", "12345678901234567890"]
        for text in others { try agrees(text) }
        XCTAssertEqual(try JSONParser.parseNotingForm(Array(#"{"b":1,"a":2}"#.utf8)).canonical, false)
        XCTAssertNil(try JSONParser.parseNotingForm(Array("2.5".utf8)).canonical, "a fraction is left to the writer")
    }

    func testRFC3339TimesConvertToUTCAndRoundTrip() {
        XCTAssertEqual(Timestamp(rfc3339: "2026-03-01T12:00:00+02:00")?.description, "2026-03-01T10:00:00Z")
        XCTAssertEqual(Timestamp(rfc3339: "2026-03-01T00:00:00.5Z")?.description, "2026-03-01T00:00:00.500Z")
        XCTAssertEqual(Timestamp(rfc3339: "2024-02-29T23:59:59.999999Z")?.description, "2024-02-29T23:59:59.999Z")
        XCTAssertEqual(Timestamp(rfc3339: "1969-12-31T23:59:59Z")?.milliseconds, -1000)
        for bad in ["2026-02-29T00:00:00Z", "2026-13-01T00:00:00Z", "2026-01-01", "2026-01-01T00:00:00", "2026-01-01T25:00:00Z", "yesterday"] {
            XCTAssertNil(Timestamp(rfc3339: bad), bad)
        }
        // Only times RFC 3339 can write back: an offset may not carry a time out of years 0000–9999,
        // and arithmetic stops at their ends.
        for outside in ["0000-01-01T00:00:00+01:00", "9999-12-31T23:00:00-05:00"] { XCTAssertNil(Timestamp(rfc3339: outside), outside) }
        XCTAssertEqual(Timestamp(rfc3339: "0000-01-01T00:00:00Z"), .earliest)
        XCTAssertEqual(Timestamp(rfc3339: "9999-12-31T23:59:59.999Z"), .latest)
        XCTAssertEqual(Timestamp(rfc3339: "9999-06-01T00:00:00Z")!.adding(days: 365).description, "9999-12-31T23:59:59.999Z")
        XCTAssertEqual(Timestamp(rfc3339: "0000-01-05T00:00:00Z")!.adding(days: -30).description, "0000-01-01T00:00:00Z")
        XCTAssertEqual(Timestamp(rfc3339: "9999-12-15T00:00:00Z")!.adding(months: 1).description, "9999-12-31T23:59:59.999Z")
        XCTAssertEqual(Timestamp.latest.adding(milliseconds: .max), .latest)
        // Every way to add stops at the ends; none overflows.
        XCTAssertEqual(Timestamp.latest.adding(days: .max), .latest)
        XCTAssertEqual(Timestamp.earliest.adding(days: .min), .earliest)
        XCTAssertEqual(Timestamp.latest.adding(seconds: .max), .latest)
        XCTAssertEqual(Timestamp.earliest.adding(seconds: .min), .earliest)
        XCTAssertEqual(Timestamp.latest.adding(months: .max), .latest)
        XCTAssertEqual(Timestamp.earliest.adding(months: .min), .earliest)
        XCTAssertEqual(Timestamp(rfc3339: "0000-03-31T00:00:00Z")!.adding(months: -1).description, "0000-02-29T00:00:00Z")
        XCTAssertEqual(Timestamp(rfc3339: "0000-01-15T00:00:00Z")!.adding(months: -1), .earliest)
        XCTAssertEqual(Timestamp(seconds: .max).milliseconds, .max)
        XCTAssertEqual(Timestamp(seconds: .min).milliseconds, .min)
        XCTAssertEqual(Timestamp(milliseconds: -1).unixSeconds, -1)
        XCTAssertEqual(Timestamp(milliseconds: -1000).unixSeconds, -1)
        XCTAssertEqual(Timestamp(milliseconds: -1001).unixSeconds, -2)
        // A time outside the writable years is written with its true year, which no RFC 3339
        // reader takes back; never cut to four digits (which would name another time).
        XCTAssertEqual(Timestamp(milliseconds: 1_772_359_200_000_000).description, "+58133-10-29T16:00:00Z")
        XCTAssertEqual(Timestamp.earliest.adding(milliseconds: 0).description, "0000-01-01T00:00:00Z")
        XCTAssertEqual(Timestamp(milliseconds: Timestamp.earliest.milliseconds - 1).description, "-0001-12-31T23:59:59.999Z")
        XCTAssertEqual(Timestamp(milliseconds: Timestamp.latest.milliseconds + 1).description, "+10000-01-01T00:00:00Z")
        for extreme in [Timestamp(milliseconds: .min), Timestamp(milliseconds: .max)] {
            XCTAssertFalse(extreme.isWritable)
            XCTAssertNil(Timestamp(rfc3339: extreme.description), extreme.description)
            XCTAssertFalse(extreme.monthKey.isEmpty)
        }
        XCTAssertTrue(Timestamp.earliest.isWritable && Timestamp.latest.isWritable)
        // Windows are measured unclamped: (end − 30 days, end] may begin before year 0000.
        XCTAssertTrue(Timestamp.earliest.isWithin(days: 30, endingAt: Timestamp.earliest.adding(days: 1)))
        XCTAssertFalse(Timestamp.earliest.isWithin(days: 30, endingAt: Timestamp.earliest.adding(days: 30)))
        XCTAssertFalse(Timestamp.earliest.adding(days: 2).isWithin(days: 30, endingAt: Timestamp.earliest.adding(days: 1)))
        // A window of any length, at any end, without overflow.
        XCTAssertTrue(Timestamp(milliseconds: 0).isWithin(days: .max, endingAt: .latest))
        XCTAssertTrue(Timestamp(milliseconds: .min).isWithin(days: .max, endingAt: Timestamp(milliseconds: .min + 1)))
        XCTAssertTrue(Timestamp(milliseconds: .min).isWithin(days: 1, endingAt: Timestamp(milliseconds: .min)), "the end is included")
        XCTAssertFalse(Timestamp(milliseconds: 0).isWithin(days: 1, endingAt: Timestamp(milliseconds: 86_400_000)), "the start is not")
        XCTAssertFalse(Timestamp(milliseconds: 0).isWithin(days: .min, endingAt: .latest))
        XCTAssertFalse(Timestamp(milliseconds: .max).isWithin(days: .max, endingAt: Timestamp(milliseconds: 0)), "after the end")
        // A leap second ends a UTC day only.
        XCTAssertEqual(Timestamp(rfc3339: "2016-12-31T23:59:60Z")?.description, "2016-12-31T23:59:59Z")
        XCTAssertEqual(Timestamp(rfc3339: "2017-01-01T00:59:60+01:00")?.description, "2016-12-31T23:59:59Z")
        XCTAssertNil(Timestamp(rfc3339: "2026-03-05T12:30:60Z"))
        XCTAssertEqual(Timestamp(rfc3339: "2026-01-31T08:00:00Z")!.adding(months: 1).description, "2026-02-28T08:00:00Z")
        XCTAssertEqual(Timestamp(rfc3339: "2026-05-15T00:00:00Z")!.monthKey, "2026-05")
        XCTAssertEqual(Timestamp.earliest.monthKey, "0000-01")
        XCTAssertEqual(Timestamp.latest.monthKey, "9999-12")
        // The log's form of a time, and the texts of the same time in any other form.
        let t = Timestamp(rfc3339: "2026-03-01T10:00:00.500Z")!
        XCTAssertTrue(t.isWritten(as: "2026-03-01T10:00:00.500Z"))
        for other in ["2026-03-01T10:00:00.5Z", "2026-03-01T12:00:00.500+02:00", "2026-03-01t10:00:00.500z", "2026-03-01T10:00:00.500Z ", ""] {
            XCTAssertEqual(Timestamp(rfc3339: other) == t && t.isWritten(as: other), false, other)
        }
        let whole = Timestamp(rfc3339: "2016-12-31T23:59:60Z")!
        XCTAssertTrue(whole.isWritten(as: "2016-12-31T23:59:59Z"))
        XCTAssertFalse(whole.isWritten(as: "2016-12-31T23:59:60Z"))
        XCTAssertFalse(whole.isWritten(as: "2016-12-31T23:59:59.000Z"))
    }

    func testISODurationsAddCalendarMonths() {
        let start = Timestamp(rfc3339: "2026-01-31T00:00:00Z")!
        XCTAssertEqual(ISODuration("P1M")?.end(from: start).description, "2026-02-28T00:00:00Z")
        XCTAssertEqual(ISODuration("P1Y")?.end(from: start).description, "2027-01-31T00:00:00Z")
        XCTAssertEqual(ISODuration("P2W")?.end(from: start).description, "2026-02-14T00:00:00Z")
        XCTAssertEqual(ISODuration("P7D")?.end(from: start).description, "2026-02-07T00:00:00Z")
        XCTAssertEqual(ISODuration("PT12H")?.end(from: start).description, "2026-01-31T12:00:00Z")
        for bad in ["P", "1M", "PT", "P1X", "P-1D", "one month", "P0D", "PT0S", "P0Y0M"] { XCTAssertNil(ISODuration(bad), bad) }
        // A repeated or misplaced unit still reads (the log may hold one), and is marked for new commands' refusal.
        XCTAssertEqual(ISODuration("P1Y2M3W4DT5H6M7S")?.hasUnitsInOrder, true)
        for odd in ["P1M1M", "P1D1M", "PT1S1M", "P1W1Y"] { XCTAssertEqual(ISODuration(odd)?.hasUnitsInOrder, false, odd) }
        XCTAssertEqual(ISODuration("P1M2M")?.months, 2)
    }

    func testSHA256AndHMACMatchKnownVectors() {
        XCTAssertEqual(SHA256.hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        // RFC 4231 test case 2.
        XCTAssertEqual(SHA256.hmacHex(key: Array("Jefe".utf8), message: Array("what do ya want for nothing?".utf8)),
                       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843")
        // Empty key and message (a key OpenSSL is handed as no pointer at all): still a real MAC.
        XCTAssertEqual(SHA256.hmacHex(key: [], message: []), "b613679a0814d9ec772f95d778c35fc5ff1697c493715653c6c712144292c5ad")
        XCTAssertEqual(SHA256.hex([UInt8]()), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }
}

/// Invite codes of every format are unique in the app and drawn from the secure random source.
final class InviteCodeTests: XCTestCase {
    func testFormatsAndAlphabet() {
        var random = RandomInviteCodes()
        let alphabet = Set(InviteCodes.alphabet)
        let code = random.makeCode(ProgramConfig.InviteConfig(), user: "u")
        XCTAssertEqual(code.count, 6)
        XCTAssertTrue(code.allSatisfy(alphabet.contains))
        var prefixed = ProgramConfig.InviteConfig()
        prefixed.format = .prefixed
        prefixed.prefix = "MYAPP"
        let p = random.makeCode(prefixed, user: "u")
        XCTAssertTrue(p.hasPrefix("MYAPP-") && p.count == 12, p)
        var username = ProgramConfig.InviteConfig()
        username.format = .username
        let u = random.makeCode(username, user: "John.Smith_42!")
        XCTAssertTrue(u.hasPrefix("johnsmith4-") && u.count == 15 && u.suffix(4).allSatisfy(alphabet.contains), u)
        // Lowercased first, then ASCII letters and digits kept, scalar by scalar.
        XCTAssertTrue(random.makeCode(username, user: "İSTANBUL").hasPrefix("istanbul-"))
        XCTAssertTrue(random.makeCode(username, user: "\u{212A}elvin").hasPrefix("kelvin-"))
        XCTAssertTrue(random.makeCode(username, user: "日本").hasPrefix("friend-"))
        // 20,000 draws of 6 characters from 32 letters: a biased or repeating source would show.
        var seen = Set<String>()
        var counts: [Character: Int] = [:]
        for _ in 0..<20_000 {
            let c = random.makeCode(ProgramConfig.InviteConfig(), user: "u")
            seen.insert(c)
            for ch in c { counts[ch, default: 0] += 1 }
        }
        XCTAssertGreaterThan(seen.count, 19_900)
        XCTAssertEqual(counts.count, 32)
        XCTAssertLessThan(counts.values.max()! - counts.values.min()!, 1_000, "the draw looks biased: \(counts)")
    }

    func testCodesOfEveryFormatStayUniqueInTheApp() throws {
        let temp = try TemporaryLedger()
        try temp.submit(#"{"type":"app.configure","app":"acme","at":"2026-01-01T00:00:00Z","settings":{"friend_referrals_enabled":true}}"#)
        var all = Set<String>()
        for (n, invites) in [#"{"format":"random","length":6}"#, #"{"format":"prefixed","prefix":"GO","length":6}"#, #"{"format":"username"}"#].enumerated() {
            try temp.submit(#"{"type":"program.create","app":"acme","at":"2026-01-01T00:00:00Z","program":"p\#(n)","environment":"live","config":{"invites":\#(invites)}}"#)
            try temp.submit(#"{"type":"program.activate","app":"acme","at":"2026-01-01T00:00:00Z","program":"p\#(n)"}"#)
            let lines = (0..<1500).map { Array(#"{"type":"invite.create","app":"acme","at":"2026-01-01T00:00:00Z","program":"p\#(n)","user":"sam\#($0 % 3)x\#($0)"}"#.utf8) }
            for result in try temp.ledger.submit(lines: lines) {
                let code = try XCTUnwrap(result.json["code"].stringValue)
                XCTAssertTrue(all.insert(InviteCodes.normalize(code)).inserted, "code \(code) issued twice")
            }
        }
        XCTAssertEqual(all.count, 4500)
    }
}
