/// A derived token's records of its links that have not run: `map` and `flatMap` wait on one
/// operand at a time, `&&` and `||` on two.
struct OperandLinks {
    private var first: OperandLink?
    private var second: OperandLink?

    mutating func insert(_ record: OperandLink) {
        if first == nil {
            first = record
        } else {
            assert(second == nil, "a derived token waits on two operands at most")
            second = record
        }
    }

    /// Forgets the record of `link`; returns it so that the operand is released after unlocking.
    mutating func remove(_ link: DerivedLink) -> OperandLink? {
        if let record = first, record.link === link {
            first = nil
            return record
        }
        if let record = second, record.link === link {
            second = nil
            return record
        }
        return nil
    }

    /// Removes the links from their operands (outside every lock).
    func leave() {
        if let first { _ = first.token.remove(id: first.id) }
        if let second { _ = second.token.remove(id: second.id) }
    }
}
