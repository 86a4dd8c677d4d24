"""What a device-to-device copy reaches at the sizes of decode-style products, measured as the corpus
benchmark measures products: many back-to-back copies between two CUDA events, buffers rotated past the
L2. Each copy moves (reads plus writes) the bytes a product of at most 16 rows reads of B, so its
percentage of the large-copy bandwidth is what the corpus's "% of copy bandwidth" column can reach at
that size when fixed per-launch costs are counted.

    PYTHONPATH=. python examples/copy_by_size.py [--sizes 8,16,32,64,117,235,470]   # MiB moved
"""
import argparse


def main() -> None:
    import cupy

    from cupy_gemm.measure import timing
    from cupy_gemm.measure.corpus_timing import copy_bandwidth, l2_bytes

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="8,12,16,24,32,48,64,117,235,470", help="MiB moved, comma-separated")
    args = parser.parse_args()
    bandwidth = copy_bandwidth()
    stream = cupy.cuda.get_current_stream()
    print(f"copy bandwidth (a 1 GiB copy, bytes read + written): {bandwidth / 1e9:.0f} GB/s")
    for mib in (int(s) for s in args.sizes.split(",")):
        moved = mib << 20
        half = moved // 2
        pairs = [(cupy.empty(half, cupy.uint8), cupy.empty(half, cupy.uint8))
                 for _ in range(max(2, -(-4 * l2_bytes(cupy.cuda.Device().id) // moved)))]
        calls = [lambda s=s, d=d: d.data.copy_from_device_async(s.data, half, stream) for s, d in pairs]
        us = timing.rotated_us(calls, 50 if mib < 100 else 10)
        print(f"{mib:4d} MiB moved: {us:7.2f} µs, {moved / us / 1e3:5.0f} GB/s, "
              f"{100 * moved / (us * 1e-6) / bandwidth:5.1f}% of the copy bandwidth")


if __name__ == "__main__":
    main()
