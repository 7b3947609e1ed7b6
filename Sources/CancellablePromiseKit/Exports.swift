@_exported import PromiseCore
