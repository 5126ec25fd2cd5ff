import HTTPTestSupport
import Foundation
import LedgerCodec
import LedgerServer
import ReferralLedger
import XCTest

/// Many clients at once: every command lands exactly once, group commit keeps the chain whole.
final class ConcurrentClientsTests: XCTestCase {
    func testSixteenClientsPostingAHundredCommandsEachLandExactlyOnce() throws {
        let f = try ServerFixture()
        let clients = 16, perClient = 100
        let answers = Collector<(String, Int, Int64?)>()
        let failures = Collector<String>()
        let port = f.port

        func postAll(duplicatesExpected: Bool) {
            runOnThreads(clients) { client in
                do {
                    let connection = try RawHTTPClient(port: port, timeout: 30)
                    for n in 0..<perClient {
                        let id = "c\(client)-\(n)"
                        let body = Commands.verify("user-\(client)-\(n)", id: id).bytes
                        try connection.sendRequest("POST", "/v1/commands", headers: [
                            ("Authorization", "Bearer \(ServerFixture.appendKey)"), ("Content-Type", "application/json"),
                        ], body: body)
                        let reply = Reply(try connection.readResponse())
                        guard reply.json["duplicate"].boolValue == (duplicatesExpected ? true : nil) else {
                            failures.append("\(id): duplicate flag wrong in \(reply.text)")
                            continue
                        }
                        answers.append((id, reply.status, reply.json["position"].intValue))
                    }
                } catch {
                    failures.append("client \(client): \(error)")
                }
            }
        }

        postAll(duplicatesExpected: false)
        XCTAssertEqual(failures.all, [])
        let first = answers.all
        XCTAssertEqual(first.count, clients * perClient)
        XCTAssertTrue(first.allSatisfy { $0.1 == 200 })
        XCTAssertEqual(f.head, UInt64(clients * perClient), "one event per command, none lost, none twice")
        let positions = Set(first.compactMap(\.2))
        XCTAssertEqual(positions, Set((1...Int64(clients * perClient))), "each command got its own position")
        let positionByID = Dictionary(uniqueKeysWithValues: first.map { ($0.0, $0.2) })

        // Posting them all again: every one a duplicate with its first position; nothing appended.
        postAll(duplicatesExpected: true)
        XCTAssertEqual(failures.all, [])
        let second = answers.all.dropFirst(first.count)
        XCTAssertEqual(second.count, clients * perClient)
        for (id, status, position) in second {
            XCTAssertEqual(status, 200, id)
            XCTAssertEqual(position, positionByID[id] ?? nil, id)
        }
        XCTAssertEqual(f.head, UInt64(clients * perClient))

        f.stop()
        let report = try f.ledger.verify()
        XCTAssertTrue(report.isClean, report.text)
        XCTAssertEqual(report.events, UInt64(clients * perClient))
    }

    /// A shutdown whose drain runs out refuses the commands still queued (503, none applied)
    /// instead of answering 503 and committing them anyway; the batch being decided is answered.
    func testAShutdownThatCannotWaitAppliesNothingItAnswered503() throws {
        let f = try ServerFixture(drainTimeout: 0.05)
        let clients = 24, perBatch = 1000
        let answers = Collector<(Int, Int)>()  // client, status (0: no answer)
        let port = f.port
        let posting = Thread {
            runOnThreads(clients) { client in
                let batch = JSONValue.array((0..<perBatch).map { Commands.verify("user-\(client)-\($0)", id: "b\(client)-\($0)") })
                let reply = try? Reply(RawHTTPClient.request(port: port, "POST", "/v1/commands", headers: [
                    ("Authorization", "Bearer \(ServerFixture.appendKey)"), ("Content-Type", "application/json"),
                ], body: batch.bytes))
                answers.append((client, reply?.status ?? 0))
            }
        }
        posting.start()
        let deadline = Date().addingTimeInterval(60)
        while answers.all.isEmpty, Date() < deadline { usleep(1_000) }
        f.stop()
        while answers.all.count < clients, Date() < deadline { usleep(1_000) }

        let all = answers.all
        XCTAssertEqual(all.count, clients)
        XCTAssertTrue(all.allSatisfy { [200, 503, 0].contains($0.1) }, "\(all)")
        // Which batches the log holds, by their commands' ids.
        var applied: [Int: Int] = [:]
        var from: UInt64 = 1
        while true {
            let page = try f.ledger.events(from: from, limit: 1000)
            for value in page.events {
                let id = try JSONValue(parsing: value)["command_id"].stringValue ?? ""
                let client = Int(id.dropFirst().prefix(while: { $0 != "-" }))!
                applied[client, default: 0] += 1
            }
            guard let next = page.next, next > from else { break }
            from = next
        }
        for (client, status) in all {
            switch status {
            case 200: XCTAssertEqual(applied[client], perBatch, "batch \(client) was answered 200")
            case 503: XCTAssertNil(applied[client], "batch \(client) was answered 503 but \(applied[client] ?? 0) of its commands were applied")
            default: XCTAssertTrue([nil, perBatch].contains(applied[client]), "batch \(client) is in whole or not at all")
            }
        }
        XCTAssertGreaterThan(all.filter { $0.1 == 503 }.count, 0, "the drain ran out with batches queued (the case under test)")
        XCTAssertTrue(try f.ledger.verify().isClean)
    }

    func testQueriesAreAnsweredWhileCommandsAreWritten() throws {
        let f = try ServerFixture()
        let port = f.port
        let failures = Collector<String>()
        let heads = Collector<Int64>()
        runOnThreads(6) { client in
            do {
                let connection = try RawHTTPClient(port: port, timeout: 30)
                for n in 0..<50 {
                    if client < 3 {
                        try connection.sendRequest("POST", "/v1/commands", headers: [("Authorization", "Bearer \(ServerFixture.appendKey)")],
                                                   body: Commands.verify("q-\(client)-\(n)").bytes)
                        let reply = try connection.readResponse()
                        if reply.status != 200 { failures.append("post \(reply.status)") }
                    } else {
                        try connection.sendRequest("GET", "/healthz")
                        let reply = Reply(try connection.readResponse())
                        if reply.status != 200 { failures.append("healthz \(reply.status)") }
                        if let head = reply.json["head_position"].intValue { heads.append(head) }
                        try connection.sendRequest("GET", "/v1/events?from=1&limit=10", headers: [("Authorization", "Bearer \(ServerFixture.readKey)")])
                        if try connection.readResponse().status != 200 { failures.append("events") }
                    }
                }
            } catch {
                failures.append("\(error)")
            }
        }
        XCTAssertEqual(failures.all, [])
        XCTAssertEqual(heads.all.count, 150)
        XCTAssertTrue(heads.all.allSatisfy { (0...150).contains($0) })
        XCTAssertEqual(f.head, 150)
    }
}
