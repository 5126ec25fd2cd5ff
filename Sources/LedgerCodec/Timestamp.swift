#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A point in time, in whole milliseconds since 1970-01-01T00:00:00Z (UTC).
///
/// Parsed from RFC 3339 (any offset, converted to UTC; digits past milliseconds are cut) and
/// always written as `YYYY-MM-DDTHH:MM:SSZ`, or `…SS.mmmZ` when it has milliseconds.
public struct Timestamp: Sendable, Hashable, Comparable, CustomStringConvertible {
    public var milliseconds: Int64

    /// Any millisecond count; one outside `earliest`…`latest` is written with its true year (see
    /// `description`), which no RFC 3339 reader takes, so a command carrying it is refused.
    public init(milliseconds: Int64) { self.milliseconds = milliseconds }
    /// Whole seconds; a count past what milliseconds can hold stops at the Int64 ends.
    public init(seconds: Int64) { self.milliseconds = Self.milliseconds(seconds, times: 1000) }

    /// Whether RFC 3339 can write this time (it lies in `earliest`…`latest`).
    public var isWritable: Bool { self >= Self.earliest && self <= Self.latest }

    /// `count` × `unit`, stopping at the Int64 ends instead of overflowing.
    private static func milliseconds(_ count: Int64, times unit: Int64) -> Int64 {
        let (product, overflow) = count.multipliedReportingOverflow(by: unit)
        return overflow ? (count < 0 ? .min : .max) : product
    }

    /// The times RFC 3339 can write: 0000-01-01T00:00:00Z through 9999-12-31T23:59:59.999Z. Parsed
    /// text outside them is refused, and arithmetic on times stops at their ends (an expiry past
    /// year 9999 is written as its last millisecond), so every time the ledger writes reads back.
    public static let earliest = Timestamp(milliseconds: -62_167_219_200_000)
    public static let latest = Timestamp(milliseconds: 253_402_300_799_999)

    private static func clamped(_ ms: Int64) -> Timestamp {
        Timestamp(milliseconds: min(max(ms, earliest.milliseconds), latest.milliseconds))
    }

    public static func < (a: Timestamp, b: Timestamp) -> Bool { a.milliseconds < b.milliseconds }

    /// The wall clock, used only to fill in a command's missing `at`.
    public static func now() -> Timestamp {
        var ts = timespec()
        clock_gettime(CLOCK_REALTIME, &ts)
        return Timestamp(milliseconds: Int64(ts.tv_sec) * 1000 + Int64(ts.tv_nsec) / 1_000_000)
    }

    public func adding(milliseconds ms: Int64) -> Timestamp {
        let (sum, overflow) = milliseconds.addingReportingOverflow(ms)
        return Self.clamped(overflow ? (ms < 0 ? .min : .max) : sum)
    }
    /// These add like `adding(milliseconds:)`: the sum stops at `earliest` and `latest`.
    public func adding(days: Int) -> Timestamp { adding(milliseconds: Self.milliseconds(Int64(days), times: 86_400_000)) }
    public func adding(seconds: Int64) -> Timestamp { adding(milliseconds: Self.milliseconds(seconds, times: 1000)) }

    /// Whether this time lies in (`end` − `days` days, `end`], measured in raw milliseconds: a window
    /// may begin before year 0000, where `adding(days:)` would stop.
    public func isWithin(days: Int, endingAt end: Timestamp) -> Bool {
        guard milliseconds <= end.milliseconds else { return false }
        // The window's start, stopping at the Int64 ends (a window of .max days holds every time before `end`).
        let (start, overflow) = end.milliseconds.subtractingReportingOverflow(Self.milliseconds(Int64(days), times: 86_400_000))
        return overflow ? days > 0 : milliseconds > start
    }

    /// Whole seconds since the epoch, rounded down (toward the past).
    public var unixSeconds: Int64 {
        let (quotient, remainder) = milliseconds.quotientAndRemainder(dividingBy: 1000)
        return remainder < 0 ? quotient - 1 : quotient
    }

    /// The civil date and time in UTC.
    public var components: (year: Int, month: Int, day: Int, hour: Int, minute: Int, second: Int, millisecond: Int) {
        let secs = unixSeconds
        let ms = Int((milliseconds % 1000 + 1000) % 1000)
        var days = secs / 86_400
        var rem = secs % 86_400
        if rem < 0 { rem += 86_400; days -= 1 }
        let (y, m, d) = Self.civil(fromDays: days)
        return (y, m, d, Int(rem / 3600), Int(rem % 3600 / 60), Int(rem % 60), ms)
    }

    /// `YYYY-MM`, the UTC calendar month (monthly allowances count by it).
    public var monthKey: String {
        // The month ends three bytes before the `T`: `…-MM-DDT`.
        withText { String(decoding: UnsafeBufferPointer(rebasing: $0[..<($0.firstIndex(of: 84)! - 3)]), as: UTF8.self) }
    }

    public var description: String {
        withText { String(decoding: $0, as: UTF8.self) }
    }

    /// Whether `text` is exactly this time as `description` writes it (the log's form), made
    /// without a String.
    public func isWritten(as text: String) -> Bool {
        withText { written in text.utf8.elementsEqual(written) }
    }

    /// The canonical text (`YYYY-MM-DDTHH:MM:SS[.mmm]Z`, milliseconds only when not zero), in a
    /// buffer on the stack. A time outside the writable years is written with its true year,
    /// signed and as long as it takes (ISO 8601's expanded form, `+58133-…`, `-0001-…`): never
    /// cut to four digits, which would name another, writable, time.
    func withText<T>(_ body: (UnsafeBufferPointer<UInt8>) -> T) -> T {
        let c = components
        return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 40) { b in
            func put(_ v: Int, _ at: Int, _ width: Int) {
                var v = v
                for i in stride(from: at + width - 1, through: at, by: -1) {
                    b[i] = UInt8(48 + v % 10)
                    v /= 10
                }
            }
            var y = 0
            if (0...9999).contains(c.year) {
                put(c.year, 0, 4); y = 4
            } else {
                b[0] = c.year < 0 ? 45 : 43
                var width = 1, rest = abs(c.year)
                while rest >= 10 { rest /= 10; width += 1 }
                width = max(width, 4)
                put(abs(c.year), 1, width); y = 1 + width
            }
            b[y] = 45; put(c.month, y + 1, 2); b[y + 3] = 45; put(c.day, y + 4, 2); b[y + 6] = 84
            put(c.hour, y + 7, 2); b[y + 9] = 58; put(c.minute, y + 10, 2); b[y + 12] = 58; put(c.second, y + 13, 2)
            var n = y + 15
            if c.millisecond != 0 { b[n] = 46; put(c.millisecond, n + 1, 3); n += 4 }
            b[n] = 90
            return body(UnsafeBufferPointer(rebasing: b[0...n]))
        }
    }

    /// Adds calendar months, clamping the day to the target month's length (Jan 31 + 1 month = Feb 28/29).
    public func adding(months: Int) -> Timestamp {
        let c = components
        let (sum, overflow) = (c.year * 12 + (c.month - 1)).addingReportingOverflow(months)
        // Past a million years either way the answer is an end of the writable years anyway.
        guard !overflow, sum.magnitude < 1_000_000 * 12 else { return (overflow ? months : sum) < 0 ? Self.earliest : Self.latest }
        var total = sum
        let year = total >= 0 ? total / 12 : (total - 11) / 12
        total -= year * 12
        let month = total + 1
        let day = min(c.day, Self.daysIn(month: month, year: year))
        let days = Self.days(fromCivil: year, month, day)
        let msOfDay = Int64(c.hour * 3600 + c.minute * 60 + c.second) * 1000 + Int64(c.millisecond)
        return Self.clamped(days * 86_400_000 + msOfDay)
    }

    static func isLeap(_ y: Int) -> Bool { (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 }
    static func daysIn(month: Int, year: Int) -> Int {
        switch month {
        case 2: return isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: return 30
        default: return 31
        }
    }

    // Howard Hinnant's days_from_civil / civil_from_days.
    static func days(fromCivil y0: Int, _ m: Int, _ d: Int) -> Int64 {
        let y = m <= 2 ? y0 - 1 : y0
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (m + 9) % 12
        let doy = (153 * mp + 2) / 5 + d - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return Int64(era * 146_097 + doe - 719_468)
    }

    static func civil(fromDays z0: Int64) -> (Int, Int, Int) {
        let z = Int(z0) + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        let y = yoe + era * 400
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        return (m <= 2 ? y + 1 : y, m, d)
    }

    /// Parses RFC 3339: `2026-01-15T10:00:00Z`, `…T10:00:00.5+02:00`. `t`/`z` and a space for `T` are accepted.
    public init?(rfc3339 text: String) {
        var text = text
        guard let milliseconds = text.withUTF8({ Self.milliseconds(rfc3339: $0) }) else { return nil }
        self.milliseconds = milliseconds
    }

    /// The time an RFC 3339 text names, in milliseconds since the epoch; nil when it is not one
    /// (or falls outside the writable years). Read from the text's own bytes.
    private static func milliseconds(rfc3339 b: UnsafeBufferPointer<UInt8>) -> Int64? {
        var i = 0
        func digits(_ n: Int) -> Int? {
            guard i + n <= b.count else { return nil }
            var v = 0
            for k in 0..<n {
                let c = b[i + k]
                guard c >= 48, c <= 57 else { return nil }
                v = v * 10 + Int(c - 48)
            }
            i += n
            return v
        }
        func expect(_ c: UInt8) -> Bool {
            guard i < b.count, b[i] == c else { return false }
            i += 1
            return true
        }
        guard let year = digits(4), expect(45), let month = digits(2), expect(45), let day = digits(2) else { return nil }
        guard i < b.count, b[i] == UInt8(ascii: "T") || b[i] == UInt8(ascii: "t") || b[i] == 32 else { return nil }
        i += 1
        guard let hour = digits(2), expect(58), let minute = digits(2), expect(58), let second = digits(2) else { return nil }
        guard (1...12).contains(month), day >= 1, day <= Self.daysIn(month: month, year: year),
              hour < 24, minute < 60, second < 61 else { return nil }
        var ms = 0
        if i < b.count, b[i] == UInt8(ascii: ".") {
            i += 1
            var n = 0
            var scale = 100
            while i < b.count, b[i] >= 48, b[i] <= 57 {
                if n < 3 { ms += Int(b[i] - 48) * scale; scale /= 10 }
                n += 1
                i += 1
            }
            guard n > 0 else { return nil }
        }
        var offset = 0
        guard i < b.count else { return nil }
        if b[i] == UInt8(ascii: "Z") || b[i] == UInt8(ascii: "z") {
            i += 1
        } else if b[i] == UInt8(ascii: "+") || b[i] == UInt8(ascii: "-") {
            let sign = b[i] == UInt8(ascii: "-") ? -1 : 1
            i += 1
            guard let oh = digits(2), expect(58), let om = digits(2), oh < 24, om < 60 else { return nil }
            offset = sign * (oh * 60 + om)
        } else {
            return nil
        }
        guard i == b.count else { return nil }
        // A leap second (:60) only ends a UTC day: 23:59:60Z, or its local time under the offset.
        if second == 60, ((hour * 60 + minute - offset) % 1440 + 1440) % 1440 != 1439 { return nil }
        let days = Self.days(fromCivil: year, month, day)
        let secs = days * 86_400 + Int64(hour * 3600 + minute * 60 + min(second, 59)) - Int64(offset * 60)
        let milliseconds = secs * 1000 + Int64(ms)
        // An offset can carry a time written in year 0000 or 9999 out of the writable years.
        guard milliseconds >= Self.earliest.milliseconds, milliseconds <= Self.latest.milliseconds else { return nil }
        return milliseconds
    }
}
