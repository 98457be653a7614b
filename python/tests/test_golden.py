"""Golden values of the contract (docs/NUMERICS.md section 12).

A few rows are transcribed here by hand (so this file stands on its own), then every entry of
the published assets/golden/vectors.json (also written by hand from NUMERICS.md, not by our
encoder) is checked through the Python API.
"""

import numpy as np
import pytest

import mxmoe
from conftest import GOLDEN, pack_codes, parse_float, same_bits, unpack_codes

MODES = ["floor", "even", "ceil", "rceil"]


def block(values, k=32):
    x = np.zeros((1, k), np.float32)
    x[0, : len(values)] = np.array(values, np.float32)
    return x


# ---- hand-transcribed rows --------------------------------------------------------------------


def test_g1_fp4_element_values():
    # G1: codes 0..F of FP4 E2M1 decode to these values (scale byte 127 = 1.0).
    codes = np.arange(16, dtype=np.uint8)
    want = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0]
    packed = pack_codes(np.concatenate([codes, np.zeros(16, np.uint8)])[None], "mxfp4")
    got = mxmoe.dequantize(packed, np.array([[127]], np.uint8), "mxfp4")[0, :16]
    assert same_bits(got, np.array(want, np.float32))


def test_g5_fp4_ties_to_even():
    # G5, scale modes floor/even/rceil: amax 5.0 gives scale byte 127; RNE ties to even codes.
    x = block([5.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, -0.25, -0.75, -1.25, -2.5, -3.5])
    codes = [0x6, 0x0, 0x2, 0x2, 0x4, 0x4, 0x6, 0x8, 0xA, 0xA, 0xC, 0xE]
    deq = [4.0, 0.0, 1.0, 1.0, 2.0, 2.0, 4.0, -0.0, -1.0, -1.0, -2.0, -4.0]
    for mode in ["floor", "even", "rceil"]:
        packed, scales = mxmoe.quantize(x, "mxfp4", mode)
        assert scales.tolist() == [[127]]
        assert unpack_codes(packed, "mxfp4")[0, :12].tolist() == codes
        assert same_bits(mxmoe.qdq(x, "mxfp4", mode)[0, :12], np.array(deq, np.float32))


def test_g7_saturation_under_floor():
    # G7: amax 7 saturates to 6 under floor (byte 127); even/ceil/rceil take byte 128.
    x = block([7.0, -6.5, 3.25, 1.0])
    p, s = mxmoe.quantize(x, "mxfp4", "floor")
    assert s[0, 0] == 127 and unpack_codes(p, "mxfp4")[0, :4].tolist() == [0x7, 0xF, 0x5, 0x2]
    for mode in ["even", "ceil", "rceil"]:
        p, s = mxmoe.quantize(x, "mxfp4", mode)
        assert s[0, 0] == 128 and unpack_codes(p, "mxfp4")[0, :4].tolist() == [0x6, 0xD, 0x3, 0x1]
        assert mxmoe.qdq(x, "mxfp4", mode)[0, :4].tolist() == [8.0, -6.0, 3.0, 1.0]


def test_g15_g16_packing():
    # G15: FP4 element 2i in the low nibble. G16: FP6 four codes in three bytes.
    c4 = [int(c, 16) for c in "0 1 2 3 4 5 6 7 8 9 A B C D E F F E D C B A 9 8 7 6 5 4 3 2 1 0".split()]
    assert pack_codes(np.array([c4]), "mxfp4")[0].tolist() == [
        0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE, 0xEF, 0xCD, 0xAB, 0x89, 0x67, 0x45, 0x23, 0x01
    ]
    # The codes above are exact FP4 values with amax 6: quantizing them (floor: byte 127)
    # gives the same bytes through mxmoe.
    x = np.array([[[0, .5, 1, 1.5, 2, 3, 4, 6, -0., -.5, -1, -1.5, -2, -3, -4, -6][c] for c in c4]], np.float32)
    p, s = mxmoe.quantize(x, "mxfp4", "floor")
    assert s.tolist() == [[127]]
    assert p[0].tolist() == [0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE, 0xEF, 0xCD, 0xAB, 0x89, 0x67, 0x45, 0x23, 0x01]
    # FP6 E2M3 codes 01 22 3F 10 = 0.125, -0.25, -7.5, 2.0 -> bytes 81 F8 43.
    x = block([0.125, -0.25, -7.5, 2.0])
    p, s = mxmoe.quantize(x, "mxfp6_e2m3", "floor")
    assert s[0, 0] == 127 and p[0, :3].tolist() == [0x81, 0xF8, 0x43]


def test_g17_subnormal_results():
    # G17: FP4 code 7 with scale byte 0 is 6 * 2^-127 = fp32 bits 0x01400000; code 1 is 2^-128
    # (an fp32 subnormal, 0x00200000); any code with byte 255 is NaN.
    p = np.zeros((1, 16), np.uint8)
    p[0, 0] = 0x17  # element 0: code 7, element 1: code 1
    got = mxmoe.dequantize(p, np.array([[0]], np.uint8), "mxfp4")[0, :2].view(np.uint32)
    assert got.tolist() == [0x01400000, 0x00200000]
    assert np.isnan(mxmoe.dequantize(p, np.array([[255]], np.uint8), "mxfp4")).all()


def test_g14_nan_block():
    # G14: a NaN or Inf anywhere in a block: scale 255, codes 0, everything decodes to NaN.
    for v in [np.nan, np.inf, -np.inf]:
        x = block([1.0, v, -3.0])
        for fmt in mxmoe.info()["formats"]:
            p, s = mxmoe.quantize(x, fmt, "even")
            assert s[0, 0] == 255 and not p.any()
            assert np.isnan(mxmoe.qdq(x, fmt)).all()


# ---- the published file -----------------------------------------------------------------------


def _codes(s):
    return [int(c, 16) for c in s.split()]


def test_golden_file_is_the_contracts(golden):
    assert golden["contract"] == "docs/NUMERICS.md section 12"
    assert GOLDEN.is_file()


def test_golden_element_decode(golden):
    for e in golden["element_decode"]:
        fmt = e["format"]
        codes = _codes(e["codes"])
        c = np.zeros(32, np.uint8)
        c[: len(codes)] = codes
        got = mxmoe.dequantize(pack_codes(c[None], fmt), np.array([[127]], np.uint8), fmt)
        want = np.array([parse_float(v) for v in e["values"]], np.float32)
        assert same_bits(got[0, : len(codes)], want), e


def test_golden_e8m0_decode(golden):
    # FP4 code 2 is 1.0, so the dequantized element is the scale's value itself.
    p = np.zeros((1, 16), np.uint8)
    p[0, 0] = 0x02
    for e in golden["e8m0_decode"]:
        got = mxmoe.dequantize(p, np.array([[e["byte"]]], np.uint8), "mxfp4")[0, 0]
        assert same_bits(np.array([got]), np.array([parse_float(e["value"])])), e


def _quantize_cases(golden):
    for e in golden["quantize"]:
        for fmt in e["formats"]:
            for mode in e["scale_modes"]:
                yield e, fmt, mode


def test_golden_quantize(golden):
    n = 0
    for e, fmt, mode in _quantize_cases(golden):
        x = np.zeros((1, 32), np.float32)
        for j, v in enumerate(e["input"]):
            x[0, j] = parse_float(v)
        packed, scales = mxmoe.quantize(x, fmt, mode)
        assert scales.tolist() == [[e["scale"]]], (e, fmt, mode)
        codes = unpack_codes(packed, fmt)[0]
        want = _codes(e["codes"])
        assert codes[: len(want)].tolist() == want, (e, fmt, mode)
        assert not codes[len(e["input"]):].any(), (e, fmt, mode)
        y = mxmoe.dequantize(packed, scales, fmt)[0]
        d = np.array([parse_float(v) for v in e["dequantized"]], np.float32)
        assert same_bits(y[: len(d)], d), (e, fmt, mode)
        assert same_bits(mxmoe.qdq(x, fmt, mode)[0], y), (e, fmt, mode)
        n += 1
    assert n > 100


def test_golden_scale_bytes(golden):
    for e in golden["scale_bytes"]:
        x = np.zeros((1, 32), np.float32)
        x[0, 0] = parse_float(e["amax"])
        for mode in MODES:
            _, s = mxmoe.quantize(x, e["format"], mode)
            assert s[0, 0] == e[mode], (e, mode)


def test_golden_packing(golden):
    for e in golden["packing"]:
        codes = _codes(e["codes"])
        want = _codes(e["packed"])
        for fmt in e["formats"]:
            n = 32 if fmt == "mxfp4" else 4
            c = np.zeros((1, max(32, len(codes))), np.uint8)
            c[0, : len(codes)] = codes
            # Our hand packer agrees with the contract...
            assert pack_codes(c, fmt)[0, : len(want)].tolist() == want
            # ...and mxmoe decodes those bytes to the values of those codes.
            packed = pack_codes(c, fmt)
            got = mxmoe.dequantize(packed, np.array([[127]], np.uint8), fmt)[0, :n]
            from conftest import ELEMENT_VALUES

            assert same_bits(got, ELEMENT_VALUES[fmt][c[0, :n]].astype(np.float32)), (e, fmt)


def test_golden_dequantize(golden):
    for e in golden["dequantize"]:
        fmt = e["format"]
        code = int(e["code"], 16)
        c = np.zeros((1, 32), np.uint8)
        c[0, 0] = code
        p = c if fmt in ("mxfp8_e4m3", "mxfp8_e5m2", "mxint8") else pack_codes(c, fmt)
        got = mxmoe.dequantize(p, np.array([[e["scale"]]], np.uint8), fmt)[0, 0]
        assert same_bits(np.array([got]), np.array([parse_float(e["value"])])), e
        if "fp16" in e:
            # Converting the exact value to fp16 (what a half-precision consumer stores).
            h = np.array([got], np.float32).astype(np.float16).view(np.uint16)[0]
            assert h == int(e["fp16"], 16), e


@pytest.mark.parametrize("fmt", ["mxfp4", "mxfp6_e2m3", "mxfp6_e3m2"])
def test_hand_dequantizer_matches_on_random_bytes(fmt):
    # The NumPy dequantizer the MoE test uses agrees with mxmoe on every code and many scales.
    from conftest import np_dequantize

    rng = np.random.default_rng(7)
    bb = {"mxfp4": 16, "mxfp6_e2m3": 24, "mxfp6_e3m2": 24}[fmt]
    p = rng.integers(0, 256, size=(64, 4 * bb), dtype=np.uint8)
    s = rng.integers(100, 150, size=(64, 4), dtype=np.uint8)
    s[0, 0] = 255
    s[1, 1] = 0
    want = np_dequantize(p, s, fmt).astype(np.float32)
    assert same_bits(mxmoe.dequantize(p, s, fmt), want)
