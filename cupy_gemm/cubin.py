"""What a cubin says of its kernel, read from the ELF image itself: registers, stack frame, static shared
memory. ptxas prints the same in the compile log (`-Xptxas=-v`), but NVRTC 13 leaves the log empty when
it serves a program it has already compiled in the process, so the image is the record that always
exists. Spill counts are only in the log."""
from __future__ import annotations

import struct

_EIFMT_NVAL, _EIFMT_BVAL, _EIFMT_HVAL, _EIFMT_SVAL = 1, 2, 3, 4
_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE = 0x2F, 0x11
_SM90_RESERVED_SMEM = 1024  # sm_90 images count the block's 1 KB system reservation in .nv.shared.<kernel>


def _sections(image: bytes) -> dict[str, bytes]:
    shoff, = struct.unpack_from("<Q", image, 0x28)
    entsize, count, names_index = struct.unpack_from("<HHH", image, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", image, shoff + i * entsize) for i in range(count)]
    names_at = headers[names_index][4]

    def name(offset: int) -> str:
        start = names_at + offset
        return image[start:image.index(b"\0", start)].decode()
    # (name offset, type, flags, address, file offset, size); .nv.shared.* are NOBITS: only their size counts
    return {name(h[0]): (image[h[4]:h[4] + h[5]] if h[1] != 8 else b"\0" * h[5]) for h in headers}


def _attributes(info: bytes):
    """(attribute, value bytes) of an .nv.info section."""
    at = 0
    while at + 2 <= len(info):
        fmt, attr = info[at], info[at + 1]
        if fmt == _EIFMT_SVAL:
            size, = struct.unpack_from("<H", info, at + 2)
            yield attr, info[at + 4:at + 4 + size]
            at += 4 + size
        elif fmt == _EIFMT_HVAL:
            yield attr, info[at + 2:at + 4]
            at += 4
        elif fmt == _EIFMT_BVAL:
            at += 4
        elif fmt == _EIFMT_NVAL:
            at += 2
        else:
            return


def resources(image: bytes, arch: str) -> dict[str, int] | None:
    """{registers, static_smem, local} of the image's one kernel, or None for PTX or an unreadable image."""
    if image[:4] != b"\x7fELF" or image[4] != 2:
        return None
    try:
        sections = _sections(image)
    except (struct.error, ValueError, IndexError):
        return None
    found = {"registers": 0, "local": 0}
    for attr, value in _attributes(sections.get(".nv.info", b"")):
        if attr in (_EIATTR_REGCOUNT, _EIATTR_FRAME_SIZE) and len(value) == 8:
            found["registers" if attr == _EIATTR_REGCOUNT else "local"] = struct.unpack("<II", value)[1]
    shared = sum(len(data) for name, data in sections.items()
                 if name.startswith(".nv.shared.") and not name.startswith(".nv.shared.reserved"))
    if arch.removesuffix("a").endswith("_90") and shared >= _SM90_RESERVED_SMEM:
        shared -= _SM90_RESERVED_SMEM
    found["static_smem"] = shared
    return found if found["registers"] else None
