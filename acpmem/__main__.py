"""``python -m acpmem`` is the same as ``acpmem`` (= ``acp memory``)."""
from acpmem.cli.main import acpmem_main

if __name__ == "__main__":
    acpmem_main()
