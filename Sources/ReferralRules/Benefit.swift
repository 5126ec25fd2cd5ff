import LedgerCodec

/// What a reward grants (SPEC §4 BENEFIT, §13 points).
public enum Benefit: Sendable, Equatable {
    case appleOfferCode(offerID: String)
    case revenueCatEntitlement(entitlement: String, duration: ISODuration)
    case custom(feature: String, payload: JSONValue)
    case points(amount: Int64)

    public init(json: JSONValue, context: String) throws {
        var r = try FieldReader(json, context: context)
        switch try r.oneOf("type", ["apple_offer_code", "revenuecat_entitlement", "custom", "points"]) {
        case "apple_offer_code":
            self = .appleOfferCode(offerID: try r.identifier("offer_id"))
        case "revenuecat_entitlement":
            let entitlement = try r.identifier("entitlement")
            let text = try r.string("duration")
            guard let duration = ISODuration(text) else {
                throw Rejection.invalid("\(context).duration must be a non-zero ISO 8601 duration in whole units (no fractions) of at most \(ISODuration.largestUnitCount) each, such as P7D, P2W, P1M or P1Y, not \"\(text)\"")
            }
            self = .revenueCatEntitlement(entitlement: entitlement, duration: duration)
        case "custom":
            let feature = try r.identifier("feature")
            let payload = r.value("payload") ?? .object([:])
            guard case .object = payload else { throw Rejection.invalid("\(context).payload must be an object") }
            // The payload is posted as it was given: a number no 64-bit integer or double holds
            // exactly would come out changed, so it is refused (send it as a string).
            func check(_ v: JSONValue) throws {
                switch v {
                case .double(let d) where d.rounded() == d && abs(d) >= 9.0e15:
                    throw Rejection.invalid("\(context).payload holds the number \(d): a whole number of 9e15 or more that is not a plain 64-bit integer may not be kept exactly (it may have lost digits already); send it as a plain integer or as a string")
                case .array(let a): for e in a { try check(e) }
                case .object(let o): for (_, e) in o { try check(e) }
                default: break
                }
            }
            try check(payload)
            self = .custom(feature: feature, payload: payload)
        default:
            self = .points(amount: try r.int("amount", min: 1))
        }
        try r.finish()
    }

    public var json: JSONValue {
        switch self {
        case .appleOfferCode(let offer): return ["type": "apple_offer_code", "offer_id": .string(offer)]
        case .revenueCatEntitlement(let e, let d): return ["type": "revenuecat_entitlement", "entitlement": .string(e), "duration": .string(d.text)]
        case .custom(let f, let p): return ["type": "custom", "feature": .string(f), "payload": p]
        case .points(let a): return ["type": "points", "amount": .int(a)]
        }
    }

    public var typeName: String {
        switch self {
        case .appleOfferCode: return "apple_offer_code"
        case .revenueCatEntitlement: return "revenuecat_entitlement"
        case .custom: return "custom"
        case .points: return "points"
        }
    }

    /// Custom and RevenueCat benefits are delivered by the worker through an outside call.
    public var needsDeliveryCall: Bool {
        switch self {
        case .custom, .revenueCatEntitlement: return true
        default: return false
        }
    }

    public var offerID: String? { if case .appleOfferCode(let o) = self { return o } else { return nil } }
}

/// An ISO 8601 duration of calendar years, months, weeks, days and clock time (`P1M`, `P7D`, `P1Y2M`, `PT12H`).
public struct ISODuration: Sendable, Equatable {
    public let text: String
    public var years = 0, months = 0, weeks = 0, days = 0, hours = 0, minutes = 0, seconds = 0
    /// Whether each unit comes at most once and in ISO 8601's order (Y M W D, then T H M S). The
    /// log's older configs may not: a repeated unit (`P1M1M`) reads as its last value, and only new
    /// commands are refused for it (`Command.newCommandRejection`).
    public private(set) var hasUnitsInOrder = true

    /// The most of one unit a duration may give (`P100000D`, `PT100000H`): far beyond any real
    /// grant, and small enough that no end time overflows.
    public static let largestUnitCount = 100_000

    public init?(_ text: String) {
        self.text = text
        let b = Array(text.utf8)
        guard b.count >= 3, b[0] == UInt8(ascii: "P") else { return nil }
        var i = 1
        var inTime = false
        var any = false
        var lastRank = -1
        while i < b.count {
            if b[i] == UInt8(ascii: "T") {
                guard !inTime else { return nil }
                inTime = true
                i += 1
                continue
            }
            var n = 0
            var digits = 0
            while i < b.count, b[i] >= 48, b[i] <= 57 {
                n = n * 10 + Int(b[i] - 48)
                digits += 1
                i += 1
                if n > Self.largestUnitCount { return nil }
            }
            guard digits > 0, i < b.count else { return nil }
            let rank: Int
            switch (inTime, b[i]) {
            case (false, UInt8(ascii: "Y")): years = n; rank = 0
            case (false, UInt8(ascii: "M")): months = n; rank = 1
            case (false, UInt8(ascii: "W")): weeks = n; rank = 2
            case (false, UInt8(ascii: "D")): days = n; rank = 3
            case (true, UInt8(ascii: "H")): hours = n; rank = 4
            case (true, UInt8(ascii: "M")): minutes = n; rank = 5
            case (true, UInt8(ascii: "S")): seconds = n; rank = 6
            default: return nil
            }
            if rank <= lastRank { hasUnitsInOrder = false }
            lastRank = rank
            any = true
            i += 1
        }
        guard any, b.last != UInt8(ascii: "T") else { return nil }
        // An entitlement that ends when it is granted grants nothing.
        guard years + months + weeks + days + hours + minutes + seconds > 0 else { return nil }
    }

    /// `start` plus this duration: calendar years and months first (day clamped), then the rest.
    public func end(from start: Timestamp) -> Timestamp {
        start.adding(months: years * 12 + months)
            .adding(days: weeks * 7 + days)
            .adding(seconds: Int64(hours * 3600 + minutes * 60 + seconds))
    }
}
