"""SHA-256 for the per-turn paths without loading OpenSSL.

``import hashlib`` loads libcrypto (~7 ms here), paid by every hook call that scores entries or frames the index;
CPython's built-in implementation is plenty for the short strings hashed here (jitter draws, frame nonces,
session folder names). Falls back to hashlib where the built-in module is missing.
"""
try:
    from _sha2 import sha256  # CPython 3.12+
except ImportError:
    try:
        from _sha256 import sha256  # CPython 3.11
    except ImportError:  # another implementation
        from hashlib import sha256

__all__ = ["sha256"]
