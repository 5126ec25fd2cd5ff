import LedgerCodec
@testable import ReferralRules
import XCTest

/// Invite codes when a format runs out of them (SPEC §5, §13): decided with a random source that
/// always draws the same characters, so the second user of a stem finds every draw taken.
final class InviteCodeExhaustionTests: XCTestCase {
    /// Draws index 0 every time: every drawn part is "AAAA…".
    struct SameDraw: InviteCodeMaker {
        mutating func makeCode(_ config: ProgramConfig.InviteConfig, user: String) -> String {
            InviteCodes.make(config, user: user) { _ in 0 }
        }
    }

    private func decide(_ state: inout LedgerState, _ text: String) throws -> Decision {
        var codes = SameDraw()
        return state.decide(try Command(json: try JSONValue(parsing: text), now: Timestamp(milliseconds: 0)), codes: &codes)
    }

    private func program(_ invites: String) throws -> LedgerState {
        var state = LedgerState()
        for text in [
            #"{"type":"app.configure","app":"a","at":"2026-01-01T00:00:00Z","settings":{"friend_referrals_enabled":true}}"#,
            #"{"type":"program.create","app":"a","at":"2026-01-01T00:00:00Z","program":"p","environment":"live","config":{"inviter":{"qualifying_event":"signup_completed","reward":{"mode":"once","friends":1,"benefit":{"type":"points","amount":1}}},"friend":null,"new_users_only":false,"invites":"# + invites + "}}",
            #"{"type":"program.activate","app":"a","at":"2026-01-01T00:00:00Z","program":"p"}"#,
        ] {
            let decision = try decide(&state, text)
            XCTAssertNil(decision.rejection, text)
        }
        return state
    }

    private func invite(_ state: inout LedgerState, _ user: String) throws -> Decision {
        try decide(&state, #"{"type":"invite.create","app":"a","at":"2026-01-02T00:00:00Z","program":"p","user":""# + user + #""}"#)
    }

    func testAUsernameStemWithNoUnusedSuffixIsRefusedWithWhatToChange() throws {
        var state = try program(#"{"format":"username"}"#)
        let first = try invite(&state, "alice")
        XCTAssertNil(first.rejection, "the first code is free")
        XCTAssertEqual(first.extra["code"], "alice-AAAA")
        let head = state.head
        // "Alice" is another user with the same stem: every draw gives the taken "alice-AAAA".
        let refused = try invite(&state, "Alice")
        let rejection = try XCTUnwrap(refused.rejection)
        XCTAssertEqual(rejection.code, .codeSpaceExhausted)
        XCTAssertTrue(rejection.message.contains("\"alice-XXXX\""), rejection.message)
        XCTAssertTrue(rejection.message.contains("config.invites.format"), rejection.message)
        XCTAssertTrue(refused.events.isEmpty)
        XCTAssertEqual(state.head, head, "nothing recorded")
        // The program still accepts referrals: a user of another stem gets a code.
        XCTAssertNil(try invite(&state, "bob").rejection, "bob's stem is free")
    }

    func testARandomFormatWithNoUnusedCodeSaysToLengthenIt() throws {
        var state = try program(#"{"format":"random","length":6}"#)
        let first = try invite(&state, "alice")
        XCTAssertNil(first.rejection, "the first code is free")
        XCTAssertEqual(first.extra["code"], "AAAAAA")
        let rejection = try XCTUnwrap(try invite(&state, "bob").rejection, "every draw is taken")
        XCTAssertEqual(rejection.code, .codeSpaceExhausted)
        XCTAssertTrue(rejection.message.contains("lengthen config.invites.length"), rejection.message)
    }
}
