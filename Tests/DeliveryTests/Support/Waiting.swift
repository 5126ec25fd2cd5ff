import Foundation
import XCTest

/// Waits (polling) until `condition` holds, failing the test if it never does within `seconds`.
/// A guard against hanging, not a timing assertion.
func waitUntil(_ what: String, seconds: Double = 20, file: StaticString = #filePath, line: UInt = #line,
               _ condition: () throws -> Bool) async rethrows {
    let deadline = Date().addingTimeInterval(seconds)
    while Date() < deadline {
        if try condition() { return }
        try? await Task.sleep(nanoseconds: 20_000_000)
    }
    XCTFail("gave up waiting: \(what)", file: file, line: line)
}

/// Writes a shell script into `folder` as an executable file; answers its path.
func writeScript(_ text: String, in folder: String, name: String) throws -> String {
    let path = folder + "/" + name
    // Not `write(toFile:atomically:)`: on Linux that leaves a TemporaryDirectory.* folder in /tmp.
    guard FileManager.default.createFile(atPath: path, contents: Data(text.utf8),
                                         attributes: [.posixPermissions: 0o755]) else {
        throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path])
    }
    return path
}

/// A fresh temporary folder for scripts and captured mail.
func makeTemporaryFolder() throws -> String {
    let path = NSTemporaryDirectory() + "referral-delivery-files-" + UUID().uuidString
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    return path
}
