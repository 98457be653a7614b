//! Sizes checked before allocating: the bytes a layer, a batch or a result will take, computed
//! with overflow-checked arithmetic and compared with the memory available, so an impossible
//! request (`mxmoe gen --experts 1000000000`, `--hidden 1099511627776`, `--tokens 1e12`) is
//! refused with the numbers instead of aborting on a failed allocation (or wrapping a product).
//!
//! The memory available is `MemAvailable` of `/proc/meminfo` (Linux; the kernel's estimate of
//! what can be allocated without swapping, documented in the kernel's `Documentation/filesystems/
//! proc.rst`). Elsewhere it is unknown and only the arithmetic is checked. `MXMOE_MEMORY_LIMIT`
//! (bytes) overrides it, for tests and for users who want a smaller budget.

use super::MoeError;
use crate::format::{MxFormat, BLOCK};

/// A product of sizes, `None` when it overflows 64 bits.
pub fn product(dims: &[usize]) -> Option<u64> {
    dims.iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(u64::try_from(d).ok()?))
}

/// Bytes in words: `12.0 GiB (12884901888 bytes)`.
pub fn bytes_words(b: u64) -> String {
    let gib = b as f64 / (1u64 << 30) as f64;
    if gib >= 1.0 {
        format!("{gib:.1} GiB ({b} bytes)")
    } else {
        format!("{:.1} MiB ({b} bytes)", b as f64 / (1u64 << 20) as f64)
    }
}

/// The memory this process may allocate: `MXMOE_MEMORY_LIMIT` (bytes) if set, else
/// `MemAvailable` from `/proc/meminfo`, else `None` (unknown).
pub fn available_memory() -> Option<u64> {
    if let Some(v) = std::env::var("MXMOE_MEMORY_LIMIT")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
    {
        return Some(v);
    }
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// Where the memory figure comes from, for messages.
fn memory_source() -> &'static str {
    if std::env::var_os("MXMOE_MEMORY_LIMIT").is_some() {
        "MXMOE_MEMORY_LIMIT"
    } else {
        "MemAvailable in /proc/meminfo"
    }
}

/// Refuse `what` when its size (`None`: overflowed) is impossible or exceeds the memory
/// available. `how` says how the size was computed (e.g. `E x 3 x H x I x 4 bytes`).
pub fn check_fits(what: &str, how: &str, bytes: Option<u64>) -> Result<(), MoeError> {
    let Some(b) = bytes else {
        return Err(MoeError::TooLarge(format!(
            "{what} would need {how}, which overflows 64-bit arithmetic"
        )));
    };
    // A Vec cannot hold more than isize::MAX bytes.
    if b > isize::MAX as u64 {
        return Err(MoeError::TooLarge(format!(
            "{what} would need {} ({how}), more than one allocation can hold",
            bytes_words(b)
        )));
    }
    if let Some(avail) = available_memory() {
        if b > avail {
            return Err(MoeError::TooLarge(format!(
                "{what} would need {} ({how}) but {} of memory is available ({})",
                bytes_words(b),
                bytes_words(avail),
                memory_source()
            )));
        }
    }
    Ok(())
}

/// Bytes of one MX tensor with `elems` elements of `format` (packed codes + one scale byte per
/// 32), or `None` on overflow.
pub fn mx_bytes(format: MxFormat, elems: u64) -> Option<u64> {
    let blocks = elems.div_ceil(BLOCK as u64);
    blocks.checked_mul(format.spec().block_bytes() as u64 + 1)
}

/// The peak bytes of building and writing a synthetic layer of `e` experts, hidden `h`,
/// intermediate `i` in `format`: the packed weights and scales, their serialized copy and, unless
/// `packed_only`, the f32 weights (kept and written too). `None` on overflow.
pub fn synth_layer_bytes(
    format: MxFormat,
    e: usize,
    h: usize,
    i: usize,
    packed_only: bool,
) -> Option<u64> {
    let elems = product(&[e, 3, h, i])?;
    let packed = mx_bytes(format, elems)?;
    let f32s = if packed_only {
        0
    } else {
        elems.checked_mul(4)?
    };
    // In memory once, serialized once (the writer's buffer).
    packed.checked_add(f32s)?.checked_mul(2)
}

/// Bytes of a token batch: `hidden_states` `[m, h]` and `router_logits` `[m, e]` in f32, held
/// and serialized. `None` on overflow.
pub fn batch_bytes(m: usize, h: usize, e: usize) -> Option<u64> {
    let per_token = (h as u64).checked_add(e as u64)?.checked_mul(4)?;
    per_token.checked_mul(m as u64)?.checked_mul(2)
}

/// Check a synthetic layer + batch request before anything is allocated.
pub fn check_synth(
    format: MxFormat,
    e: usize,
    h: usize,
    i: usize,
    packed_only: bool,
    tokens: usize,
) -> Result<(), MoeError> {
    let layer = synth_layer_bytes(format, e, h, i, packed_only);
    check_fits(
        &format!("a {format} layer of {e} experts, H {h}, I {i}"),
        if packed_only {
            "E x 3 x H x I elements, packed, held and serialized"
        } else {
            "E x 3 x H x I elements as f32 and packed, held and serialized"
        },
        layer,
    )?;
    let batch = batch_bytes(tokens, h, e);
    check_fits(
        &format!("a batch of {tokens} tokens (H {h}, {e} experts)"),
        "M x (H + E) x 4 bytes, held and serialized",
        batch,
    )?;
    // Both together.
    check_fits(
        "the layer and the batch together",
        "their sum",
        layer.zip(batch).and_then(|(a, b)| a.checked_add(b)),
    )
}

/// The tile slots of a forward's grouped GEMM / GEMV grid and tile list (both GPU backends): at
/// most this many tiles of `tm` rows cover `na` token-expert pairs over `el` local experts. Each non-empty expert with
/// c pairs takes ceil(c / tm) <= (c + tm - 1) / tm tiles and at most min(el, na) experts are
/// non-empty, so the tiles number at most (na + (tm - 1) min(el, na)) / tm (and never more than
/// na). The bound used before, ceil(na / tm) + min(el, na), gave one token of gpt-oss-120b five
/// slots for its four tiles: a fifth of the GEMV's blocks started only to find no tile.
pub fn max_tiles(na: usize, el: usize, tm: usize) -> usize {
    (na + (tm - 1) * el.min(na)) / tm
}

#[cfg(test)]
mod tests {
    use super::*;

    /// max_tiles against every way of spreading the pairs over the experts (small cases,
    /// counted by hand through the tiles each expert takes): never below the worst spread, and
    /// equal to it.
    #[test]
    fn max_tiles_is_the_worst_spread() {
        fn worst(na: usize, el: usize, tm: usize, e: usize) -> usize {
            // the most tiles `na` pairs can take over experts e.. el
            if na == 0 || e == el {
                return if na == 0 { 0 } else { usize::MAX };
            }
            (0..=na)
                .filter_map(|c| {
                    let rest = worst(na - c, el, tm, e + 1);
                    (rest != usize::MAX).then(|| c.div_ceil(tm) + rest)
                })
                .max()
                .unwrap()
        }
        for tm in [1, 4, 16, 64] {
            for el in 1..=5 {
                for na in 1..=12 {
                    assert_eq!(
                        max_tiles(na, el, tm),
                        worst(na, el, tm, 0),
                        "na {na} el {el} tm {tm}"
                    );
                }
            }
        }
        // one token of gpt-oss-120b (top-4, GEMV tiles of 4): four slots, not five
        assert_eq!(max_tiles(4, 128, 4), 4);
        // DeepSeek-R1 at 2048 tokens (16384 pairs, 256 experts, 64-row tiles)
        assert_eq!(max_tiles(16384, 256, 64), 16384 / 64 + 63 * 256 / 64);
    }

    #[test]
    fn products_overflow_to_none() {
        assert_eq!(product(&[1 << 20, 1 << 20]), Some(1 << 40));
        assert_eq!(product(&[1 << 40, 1 << 30]), None);
        assert_eq!(product(&[]), Some(1));
    }

    #[test]
    fn impossible_sizes_are_refused_with_the_numbers() {
        // 1e9 experts of H = I = 2880: 2.5e16 elements.
        let e = check_synth(MxFormat::Fp4E2M1, 1_000_000_000, 2880, 2880, true, 1).unwrap_err();
        let s = e.to_string();
        assert!(
            s.contains("1000000000 experts") && s.contains("bytes"),
            "{s}"
        );
        // Hidden 2^40 with 2^40 intermediate: the element count overflows u64.
        let e = check_synth(MxFormat::Fp4E2M1, 8, 1 << 40, 1 << 40, true, 1).unwrap_err();
        assert!(e.to_string().contains("overflows"), "{e}");
        // 1e12 tokens.
        let e = check_synth(MxFormat::Fp4E2M1, 8, 64, 64, true, 1_000_000_000_000).unwrap_err();
        assert!(e.to_string().contains("1000000000000 tokens"), "{e}");
        // A small layer passes.
        check_synth(MxFormat::Fp4E2M1, 8, 64, 64, false, 16).unwrap();
    }

    #[test]
    fn synth_sizes_count_what_is_held() {
        // 1 expert, H = I = 32: 3072 elements; FP4 packed = 96 blocks x 17 bytes = 1632; f32 =
        // 12288; held and serialized: x 2.
        assert_eq!(
            synth_layer_bytes(MxFormat::Fp4E2M1, 1, 32, 32, true),
            Some(2 * 1632)
        );
        assert_eq!(
            synth_layer_bytes(MxFormat::Fp4E2M1, 1, 32, 32, false),
            Some(2 * (1632 + 12288))
        );
        assert_eq!(batch_bytes(2, 32, 8), Some(2 * 2 * 40 * 4));
    }
}
