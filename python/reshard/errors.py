"""reshard's status codes and the exception every failing call raises."""

import enum


class Status(enum.IntEnum):
    """reshard_status_t: 0 is success, every error is negative (reshard.h)."""

    OK = 0
    INVALID_ARG = -1
    NOMEM = -2
    SHAPE = -3
    DTYPE = -4
    BOX = -5
    UNCOVERED = -6
    OVERLAP = -7
    RANK = -8
    OVERFLOW = -9
    BUFFER = -10
    CONFIG = -11
    TRANSPORT = -12
    TIMEOUT = -13
    UNSUPPORTED = -14
    IO = -15
    VERIFY = -16
    STAGING = -17
    MISMATCH = -18


class ReshardError(RuntimeError):
    """A reshard call failed.

    Attributes:
        status   the Status (an IntEnum: ``e.status.name``, ``int(e.status)``)
        c_name   the C name of the status ("RESHARD_ERR_BUFFER")
        message  the C library's message (names tensor, rank, buffer and box),
                 or, for a check made in Python before calling C, that check's
                 message naming the parameter
        problems every (Status, message) of a binding error found in Python (its
                 message shows the first few and the count); [] otherwise
    """

    def __init__(self, status, c_name, message, context=None):
        try:
            self.status = Status(status)
        except ValueError:
            self.status = status
        self.c_name = c_name
        self.message = message
        self.context = context
        self.problems = []
        text = "%s: %s" % (c_name, message)
        if context:
            text = "%s: %s" % (context, text)
        super().__init__(text)

    def __reduce__(self):
        # pickle/copy (multiprocessing, Ray) rebuild it from the constructor's
        # arguments, not from self.args (the formatted text alone)
        return (type(self), (int(self.status), self.c_name, self.message, self.context))


def error(status, message, context=None):
    """A ReshardError raised by a check made in Python (same shape as a C one)."""
    status = Status(status)
    return ReshardError(status, "RESHARD_ERR_" + status.name, message, context)
