#if DEBUG
// What one record call of `ChainActions` added, in debug builds only: a log a test compares
// with what an event should have decided, instead of reading the machine's tables or running
// the actions to see what happened. Release builds record nothing and have none of this.

/// One thing a `ChainActions` was told to do, as recorded (debug builds only).
enum ChainAction: Equatable, Sendable {
    /// The member of slot `slot` was rejected under the lock; `wasPending` is false if its
    /// promise had settled on its own first (then its cancel closure and links are released,
    /// not called or followed).
    case reject(slot: UInt32, wasPending: Bool)
    /// A cancel closure is to be called after the lock.
    case call
    /// A link is to be followed: the chains or tasks it reaches cancelled with an error (its
    /// `String(describing:)`: errors are existentials).
    case follow(LinkShape, error: String)
    /// What a member held is to be released uncalled after the lock.
    case release(Held)
    /// A running body's token is to be completed after the lock, cancelled or not.
    case completeToken(cancelled: Bool)

    /// What a link reaches.
    indirect enum LinkShape: Equatable, Sendable {
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
    struct Held: OptionSet, Equatable, Sendable, CustomStringConvertible {
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
#endif
