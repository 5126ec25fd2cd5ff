import LedgerCodec
import LedgerStore

/// A signed statement that the ledger's history had this head: an auditor pins it, and later
/// proves that the history they are given contains exactly that head (and extends it).
public struct Checkpoint: Sendable, Equatable {
    public var headPosition: UInt64
    public var headHash: String
    public var signedAt: Timestamp
    /// Ed25519 signature (hex) of `message`.
    public var signature: String

    /// The signed bytes: a fixed text, so any tool can rebuild and check them.
    public var message: [UInt8] {
        Array("referral-ledger checkpoint v1\nhead_position=\(headPosition)\nhead_hash=\(headHash)\nsigned_at=\(signedAt)\n".utf8)
    }

    public var json: JSONValue {
        ["head_position": .int(Int64(headPosition)), "head_hash": .string(headHash), "signed_at": .string(signedAt.description),
         "signature": .string(signature), "algorithm": "ed25519"]
    }

    public init(headPosition: UInt64, headHash: String, signedAt: Timestamp, signature: String) {
        self.headPosition = headPosition
        self.headHash = headHash
        self.signedAt = signedAt
        self.signature = signature
    }

    /// Reads a checkpoint file strictly: exactly the fields `json` writes, a plain whole position,
    /// a 64-digit lowercase hex hash, the algorithm `ed25519` (a file that says otherwise was not
    /// made by `checkpoint`, and is refused rather than half-read).
    public init(json: JSONValue) throws {
        let fields: Set<String> = ["head_position", "head_hash", "signed_at", "signature", "algorithm"]
        guard let object = json.objectValue, Set(object.keys) == fields else {
            throw LedgerError(code: "bad_checkpoint", message: "a checkpoint is a JSON object of exactly \(fields.sorted().joined(separator: ", "))")
        }
        guard case .int(let p) = json["head_position"], p >= 0 else {
            throw LedgerError(code: "bad_checkpoint", message: "head_position must be a whole number of at least 0")
        }
        guard let h = json["head_hash"].stringValue, h.utf8.count == 64, h.utf8.allSatisfy({ (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }) else {
            throw LedgerError(code: "bad_checkpoint", message: "head_hash must be 64 lowercase hex digits (a SHA-256)")
        }
        guard let t = json["signed_at"].stringValue.flatMap({ Timestamp(rfc3339: $0) }), let sig = json["signature"].stringValue else {
            throw LedgerError(code: "bad_checkpoint", message: "signed_at must be an RFC 3339 time and signature a hex string")
        }
        guard json["algorithm"] == "ed25519" else {
            throw LedgerError(code: "bad_checkpoint", message: "algorithm must be \"ed25519\", the only one checkpoints are signed with")
        }
        self.init(headPosition: UInt64(p), headHash: h, signedAt: t, signature: sig)
    }

    /// Signs a head with the operator's Ed25519 private key (PEM).
    public static func sign(_ head: ChainHead, at time: Timestamp = .now(), privateKeyPEM: String) throws -> Checkpoint {
        var cp = Checkpoint(headPosition: head.position, headHash: head.hash, signedAt: time, signature: "")
        cp.signature = try Ed25519.sign(cp.message, privateKeyPEM: privateKeyPEM)
        return cp
    }

    /// What a history proves about this checkpoint, given the hash of its value at the pinned
    /// position (nil when the history is shorter).
    public func check(publicKeyPEM: String, hashAtPosition: String?, historyLength: UInt64) throws -> [Violation] {
        var problems: [Violation] = []
        // A checkpoint whose signature fails says nothing about the history: its head is not
        // compared (a forged checkpoint is not news of a rewritten history).
        guard try Ed25519.verify(message, signatureHex: signature, publicKeyPEM: publicKeyPEM) else {
            return [Violation(position: headPosition, rule: "checkpoint.signature",
                              message: "the checkpoint's signature does not verify under the given public key: the checkpoint was altered, or signed with another key; the history was not compared with it")]
        }
        if headPosition == 0 { return problems }
        if historyLength < headPosition {
            problems.append(Violation(position: headPosition, rule: "checkpoint.missing",
                                      message: "the history ends at \(historyLength), before the checkpoint's head \(headPosition): events were removed"))
        } else if hashAtPosition != headHash {
            problems.append(Violation(position: headPosition, rule: "checkpoint.mismatch",
                                      message: "event \(headPosition) does not hash to the checkpoint's head_hash: the history was rewritten"))
        }
        return problems
    }
}
