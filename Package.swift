// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "referral-ledger",
    platforms: [.macOS(.v14)],
    products: [
        .executable(name: "referral-ledger", targets: ["referral-ledger"]),
        // The library: the ledger and the modules its API speaks in (JSON and times, commands and
        // state, and the storage errors and chain head it throws and answers), and the delivery
        // worker, which an embedding process runs itself (it holds the folder's writer lock).
        .library(name: "ReferralLedger", targets: ["ReferralLedger", "LedgerCodec", "ReferralRules", "LedgerStore", "Delivery"]),
    ],
    targets: [
        // C libraries from Debian, wrapped as system libraries.
        .systemLibrary(name: "CLMDB", pkgConfig: "lmdb", providers: [.apt(["liblmdb-dev"])]),
        .systemLibrary(name: "CCrypto", pkgConfig: "libcrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CMicroHTTPD", pkgConfig: "libmicrohttpd", providers: [.apt(["libmicrohttpd-dev"])]),
        .systemLibrary(name: "CCurl", pkgConfig: "libcurl", providers: [.apt(["libcurl4-openssl-dev"])]),
        // The executables' allocator (in place of glibc's malloc; the library leaves the choice to
        // the process that embeds it): see docs/decisions.md.
        .systemLibrary(name: "CJemalloc", pkgConfig: "jemalloc", providers: [.apt(["libjemalloc-dev"])]),

        // JSON, timestamps and SHA-256: the value types every layer speaks.
        .target(name: "LedgerCodec", dependencies: ["CCrypto"]),
        // Bytes and hashes: LMDB, the chained log, idempotency. Knows nothing of referrals.
        .target(name: "LedgerStore", dependencies: ["CLMDB", "LedgerCodec"]),
        // The referral rules: commands, events, state, decide, fold. Pure.
        .target(name: "ReferralRules", dependencies: ["LedgerCodec"]),
        // Read models: pure folds and query answers.
        .target(name: "ReferralProjections", dependencies: ["ReferralRules"]),
        // The library product: the ledger that composes store, rules and projections.
        .target(name: "ReferralLedger", dependencies: ["LedgerStore", "ReferralRules", "ReferralProjections"]),
        // An HTTP/1.1 server on libmicrohttpd: requests in, responses out; knows no routes.
        .target(name: "HTTPServer", dependencies: ["CMicroHTTPD", "LedgerCodec"]),
        // A raw HTTP/1.1 test client shared by the server tests (not part of the products).
        .target(name: "HTTPTestSupport"),
        // The delivery worker: signed webhooks, RevenueCat grants, retries, owner notifications.
        .target(name: "Delivery", dependencies: ["ReferralLedger", "LedgerCodec", "CCurl"]),
        // The HTTP API (SPEC §10): routes, API keys and roles, the RevenueCat webhook, group commit.
        .target(name: "LedgerServer", dependencies: ["ReferralLedger", "HTTPServer", "Delivery", "LedgerCodec", "LedgerStore", "ReferralRules"]),
        // The thin command-line shell.
        .executableTarget(name: "referral-ledger", dependencies: ["ReferralLedger", "Delivery", "LedgerServer", "CJemalloc"]),
        // Benchmarks against raw LMDB, run with `swift run -c release ledger-bench`.
        .executableTarget(name: "ledger-bench", dependencies: ["ReferralLedger", "CLMDB", "CCrypto", "CJemalloc"]),

        .testTarget(name: "ReferralLedgerTests", dependencies: ["ReferralLedger", "LedgerStore", "LedgerCodec", "ReferralRules", "ReferralProjections", "Delivery"]),
        .testTarget(name: "HTTPServerTests", dependencies: ["HTTPServer", "HTTPTestSupport"]),
        .testTarget(name: "DeliveryTests", dependencies: ["Delivery", "ReferralLedger", "LedgerCodec", "HTTPServer"]),
        .testTarget(name: "LedgerServerTests", dependencies: ["HTTPTestSupport", "LedgerServer", "ReferralLedger", "ReferralRules", "HTTPServer", "LedgerCodec", "LedgerStore"]),
    ]
)
