import PromiseCore

/// What one event of `ChainState` decided is left to do after the storage's lock is released:
/// every event that changes a chain returns one, and the storage runs it in one way
/// (`CancelStorage.perform`), switching on the case. Listing a member returns `none`, a member
/// that settled what it held (`release`); a cancel, a link to follow, a token or a handle to
/// release are `run`. Not copyable, like its effects: it moves from the event to the storage.
enum ChainOutcome: ~Copyable {
    /// Nothing to do.
    case none
    /// Release what a member held (a member that settled, a link the machine keeps no more).
    case release(MemberContents)
    /// Call, follow, complete, run and release what the effects hold (see `ChainEffects`).
    case run(ChainEffects)

    /// `run(effects)`, or `none` if `effects` holds nothing.
    @inline(__always)
    init(_ effects: consuming ChainEffects) {
        self = effects.isEmpty ? .none : .run(effects)
    }

    /// What the outcome holds, by kind: what tests assert an event returned.
    var summary: Summary {
        var summary = Summary()
        switch self {
        case .none:
            break
        case .release(var contents):
            if contents.token.take() != nil { summary.tokens.append(false) }
            if !contents.isEmpty { summary.released.append(Held(contents)) }
        case .run(let effects):
            effects.addSummary(to: &summary)
        }
        return summary
    }

    /// What an outcome holds, by kind, read from what it will do (the same in every build).
    struct Summary: Equatable, CustomStringConvertible {
        /// Pending promises rejected under the lock, whose released handlers run after it.
        var rejected = 0
        /// Cancel closures to call.
        var calls = 0
        /// Links to follow, in the order they were added.
        var follows: [Follow] = []
        /// Running bodies' tokens to complete, each cancelled or not.
        var tokens: [Bool] = []
        /// What members held, released after the lock, uncalled: the cancel closures and links
        /// of members that left, and the promises rejected with no handler waiting on them (kept
        /// until then: a step's body may capture what runs user code as it goes).
        var released: [Held] = []
        /// Whether an absorbed storage stops counting as a handle (`releaseHold`).
        var releasesHold = false

        var description: String {
            var parts: [String] = []
            if rejected > 0 { parts.append("rejected: \(rejected)") }
            if calls > 0 { parts.append("calls: \(calls)") }
            if !follows.isEmpty { parts.append("follows: \(follows)") }
            if !tokens.isEmpty { parts.append("tokens cancelled: \(tokens)") }
            if !released.isEmpty { parts.append("released: \(released)") }
            if releasesHold { parts.append("releases its hold") }
            return parts.isEmpty ? "nothing" : "(" + parts.joined(separator: ", ") + ")"
        }
    }

    /// A link to follow: what it reaches, and the error (its `String(describing:)`: errors are
    /// existentials) the chains it reaches are cancelled with.
    struct Follow: Equatable, CustomStringConvertible {
        var link: LinkShape
        var error: String

        var description: String { "\(link) with \(error)" }
    }

    /// What a link reaches.
    indirect enum LinkShape: Equatable {
        case chain
        case task
        case both(LinkShape, LinkShape)

        init(_ link: CancelLink) {
            switch link {
            case .chain: self = .chain
            case .task: self = .task
            case .both(let first, let second): self = .both(LinkShape(first), LinkShape(second))
            }
        }
    }

    /// What released member contents held.
    struct Held: OptionSet, Equatable, CustomStringConvertible {
        let rawValue: UInt8

        init(rawValue: UInt8) { self.rawValue = rawValue }

        /// A cancel closure.
        static let closure = Held(rawValue: 1)
        /// A link.
        static let link = Held(rawValue: 2)
        /// A promise.
        static let promise = Held(rawValue: 4)

        init(_ contents: MemberContents) {
            self = []
            if contents.cancelBody != nil { insert(.closure) }
            if contents.link != nil { insert(.link) }
            if contents.target != nil { insert(.promise) }
        }

        var description: String {
            let names = [(Held.closure, ".closure"), (.link, ".link"), (.promise, ".promise")]
            return "[" + names.filter { contains($0.0) }.map(\.1).joined(separator: ", ") + "]"
        }
    }
}
