extension Array {
    /// `map`, reading the elements through the array's buffer. The combinators that call it are
    /// generic over the value type and not specialized for it: there, `map` reads each element
    /// through an accessor coroutine that allocates its frame, one allocation per input.
    @inlinable @inline(__always)
    func mapThroughBuffer<U>(_ transform: (Element) -> U) -> [U] {
        withUnsafeBufferPointer { buffer in
            var result: [U] = []
            result.reserveCapacity(buffer.count)
            for index in buffer.indices { result.append(transform(buffer[index])) }
            return result
        }
    }
}
