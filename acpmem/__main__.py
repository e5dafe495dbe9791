"""``python -m acpmem`` is the same as ``acpmem`` (= ``acp memory``)."""
from acpmem.cli.startup import collect_less

collect_less()   # before the modules load
from acpmem.cli.main import acpmem_main  # noqa: E402

if __name__ == "__main__":
    acpmem_main()
