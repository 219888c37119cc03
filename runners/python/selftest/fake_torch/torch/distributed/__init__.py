from .distributed_c10d import *  # noqa: F401,F403
from .distributed_c10d import all_gather_object  # noqa: F401
