import CancellablePromiseKit

print("CancellablePromiseKit example")
