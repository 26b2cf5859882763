"""Entry point of a build helper process (``python -m autotune.accel.helper_process``): see
:mod:`autotune.accel.helpers`."""

from .helpers import serve

if __name__ == "__main__":
    serve()
