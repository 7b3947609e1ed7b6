/// A derived token's record of its link on an operand.
struct OperandLink {
    let token: CancellationToken
    let id: UInt64
    let link: DerivedLink
}
