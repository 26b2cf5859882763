"""Exceptions raised by the device layer."""


class AccelError(RuntimeError):
    """Base class for device-layer errors."""


class DeviceNotFoundError(AccelError):
    """No device matches the request (``AUTOTUNE_DEVICE`` or an explicit selector)."""


class BackendUnavailableError(AccelError):
    """The requested backend's Python package or driver is not usable on this machine."""


class CompileError(AccelError):
    """A kernel failed to compile; the message quotes the log against the ``.mako`` lines."""

    def __init__(self, message: str, log: str = "", source: str = ""):
        super().__init__(message)
        self.log = log
        self.source = source


class LaunchError(AccelError):
    """A launch configuration is invalid for the kernel or device, or the launch failed."""
