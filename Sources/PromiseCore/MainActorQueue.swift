import Dispatch

// Main-actor bodies. Every operator that runs a body comes in two overloads: one whose body is
// `@MainActor`, chosen when no queue is given (or `on: .main`), and one whose body is
// `@Sendable`, chosen when a queue or `nil` is given. So a body's type says where it runs, and a
// Swift 6 client is told when a body that runs on another thread touches main-actor state, a
// captured `var` or an object that is not `Sendable`.

/// The main queue, as the main actor's queue: the `on:` of an operator whose body is a
/// main-actor body.
///
/// It is the default, so a body given no `on:` is `@MainActor` and runs on the main queue (queued
/// with `async`, never synchronously). Write `on: .main` to say so explicitly; a `DispatchQueue`
/// value (`on: DispatchQueue.main`, `on: someQueue`) or `on: nil` chooses the overload whose body
/// is `@Sendable` instead.
///
/// ```swift
/// @MainActor final class Screen {
///     var title = ""
///     func load() {
///         fetchTitle().done { self.title = $0 }   // a main-actor body, run on the main queue
///     }
/// }
/// ```
public struct MainActorQueue: Sendable {
    @inlinable init() {}

    /// The main queue, on which main-actor bodies run.
    @inlinable public static var main: MainActorQueue { MainActorQueue() }

    /// The dispatch queue the bodies are queued on.
    @inlinable public var queue: DispatchQueue { DispatchQueue.main }
}

// The three shapes of a main-actor body the operators take, seen as the nonisolated functions
// they run as. Each is only ever called from a block queued on the main queue (the `on:` of the
// operator it is given to is `MainActorQueue.main.queue`), which is the main actor's executor;
// debug builds check it on every call. Main-actor isolation does not change a function's
// representation, so the conversion itself is free.

/// A main-actor body taking a value, as the function the step calls on the main queue.
@inlinable package func _mainActorBody<A, B>(
    _ body: @escaping @MainActor @Sendable (A) throws -> B
) -> @Sendable (A) throws -> B {
    let plain = unsafeBitCast(body, to: (@Sendable (A) throws -> B).self)
    #if DEBUG
    return { value in
        dispatchPrecondition(condition: .onQueue(.main))
        return try plain(value)
    }
    #else
    return plain
    #endif
}

/// A main-actor body that cannot throw, as the function the step calls on the main queue.
@inlinable package func _mainActorBody<A, B>(
    _ body: @escaping @MainActor @Sendable (A) -> B
) -> @Sendable (A) -> B {
    let plain = unsafeBitCast(body, to: (@Sendable (A) -> B).self)
    #if DEBUG
    return { value in
        dispatchPrecondition(condition: .onQueue(.main))
        return plain(value)
    }
    #else
    return plain
    #endif
}

/// A main-actor body taking two values (`sortedValues`' order), as the function the step calls on
/// the main queue.
@inlinable package func _mainActorBody<A, B, C>(
    _ body: @escaping @MainActor @Sendable (A, B) -> C
) -> @Sendable (A, B) -> C {
    let plain = unsafeBitCast(body, to: (@Sendable (A, B) -> C).self)
    #if DEBUG
    return { first, second in
        dispatchPrecondition(condition: .onQueue(.main))
        return plain(first, second)
    }
    #else
    return plain
    #endif
}

/// A main-actor body taking nothing, as the function the step calls on the main queue.
@inlinable package func _mainActorBody<B>(
    _ body: @escaping @MainActor @Sendable () -> B
) -> @Sendable () -> B {
    let plain = unsafeBitCast(body, to: (@Sendable () -> B).self)
    #if DEBUG
    return {
        dispatchPrecondition(condition: .onQueue(.main))
        return plain()
    }
    #else
    return plain
    #endif
}
