//! The abstract values: an interval of i64 per integer scalar ([`V::I`]), component-wise
//! composites ([`V::C`]) and unknown ([`V::Top`]); their join, the range of an integer type, the
//! value of a literal, and the integer operations on intervals ([`binary`], computed in i128 and
//! unknown where the result may wrap its type).

use naga::{BinaryOperator as B, Literal, ScalarKind, TypeInner};

#[derive(Clone, Debug, PartialEq)]
pub enum V {
    I(i64, i64),
    C(Vec<V>),
    Top,
}

pub(super) fn join(a: &V, b: &V) -> V {
    match (a, b) {
        (V::I(a0, a1), V::I(b0, b1)) => V::I((*a0).min(*b0), (*a1).max(*b1)),
        (V::C(x), V::C(y)) if x.len() == y.len() => {
            V::C(x.iter().zip(y).map(|(p, q)| join(p, q)).collect())
        }
        _ => V::Top,
    }
}

/// The range of an integer (or bool) scalar type.
pub(super) fn range_of(t: &TypeInner) -> Option<(i64, i64)> {
    let s = match t {
        TypeInner::Scalar(s) => s,
        TypeInner::Atomic(s) => s,
        _ => return None,
    };
    match (s.kind, s.width) {
        (ScalarKind::Uint, 4) => Some((0, u32::MAX as i64)),
        (ScalarKind::Sint, 4) => Some((i32::MIN as i64, i32::MAX as i64)),
        (ScalarKind::Bool, _) => Some((0, 1)),
        _ => None,
    }
}

pub(super) fn set_path(slot: &mut V, path: &[u32], v: V) {
    if path.is_empty() {
        *slot = v;
        return;
    }
    match slot {
        V::C(c) if (path[0] as usize) < c.len() => {
            set_path(&mut c[path[0] as usize], &path[1..], v)
        }
        _ => {} // an unknown composite stays unknown
    }
}

pub(super) fn lit(l: &Literal) -> V {
    match *l {
        Literal::U32(v) => V::I(v as i64, v as i64),
        Literal::I32(v) => V::I(v as i64, v as i64),
        Literal::AbstractInt(v) => V::I(v, v),
        Literal::Bool(b) => V::I(b as i64, b as i64),
        _ => V::Top,
    }
}

/// [a, b] if it fits type `t`, else unknown (the operation may wrap).
/// (Computed in i128: no operation on two 32-bit values overflows it.)
pub(super) fn fit(t: &TypeInner, a: i128, b: i128) -> V {
    match range_of(t) {
        Some((lo, hi)) if a >= lo as i128 && b <= hi as i128 => V::I(a as i64, b as i64),
        _ => V::Top,
    }
}

fn scalar_of(t: &TypeInner) -> Option<TypeInner> {
    match t {
        TypeInner::Scalar(_) => Some(t.clone()),
        TypeInner::Vector { scalar, .. } => Some(TypeInner::Scalar(*scalar)),
        _ => None,
    }
}

fn w(x: i64) -> i128 {
    x as i128
}

pub(super) fn binary(op: B, l: &V, r: &V, lt: &TypeInner, rt: &TypeInner, out: &TypeInner) -> V {
    let (Some(ls), Some(rs), Some(os)) = (scalar_of(lt), scalar_of(rt), scalar_of(out)) else {
        return V::Top;
    };
    // Component-wise over vectors (a scalar side broadcast).
    match (l, r) {
        (V::C(a), V::C(b)) if a.len() == b.len() => {
            return V::C(
                a.iter()
                    .zip(b)
                    .map(|(x, y)| binary(op, x, y, &ls, &rs, &os))
                    .collect(),
            )
        }
        (V::C(a), y) if !matches!(rt, TypeInner::Vector { .. }) => {
            return V::C(a.iter().map(|x| binary(op, x, y, &ls, &rs, &os)).collect())
        }
        (x, V::C(b)) if !matches!(lt, TypeInner::Vector { .. }) => {
            return V::C(b.iter().map(|y| binary(op, x, y, &ls, &rs, &os)).collect())
        }
        _ => {}
    }
    if matches!(lt, TypeInner::Vector { .. }) || matches!(rt, TypeInner::Vector { .. }) {
        return V::Top;
    }
    let li = match l {
        V::I(a, b) => (*a, *b),
        _ => match range_of(&ls) {
            Some(r) => r,
            None => return V::Top,
        },
    };
    let ri = match r {
        V::I(a, b) => (*a, *b),
        _ => match range_of(&rs) {
            Some(r) => r,
            None => return V::Top,
        },
    };
    let ((a, b), (c, d)) = (li, ri);
    let cmp = |lo: bool, hi: bool| V::I(lo as i64, hi as i64);
    match op {
        B::Add => fit(out, w(a) + w(c), w(b) + w(d)),
        B::Subtract => fit(out, w(a) - w(d), w(b) - w(c)),
        B::Multiply => {
            let p = [w(a) * w(c), w(a) * w(d), w(b) * w(c), w(b) * w(d)];
            fit(out, *p.iter().min().unwrap(), *p.iter().max().unwrap())
        }
        B::Divide if c > 0 && a >= 0 => fit(out, w(a / d), w(b / c)),
        B::Modulo if c > 0 && a >= 0 => {
            if b < c {
                V::I(a, b)
            } else {
                V::I(0, b.min(d - 1))
            }
        }
        B::And if a >= 0 && c >= 0 => {
            if a == b && c == d {
                V::I(a & c, a & c)
            } else {
                V::I(0, b.min(d))
            }
        }
        B::InclusiveOr | B::ExclusiveOr if a >= 0 && c >= 0 => {
            if a == b && c == d {
                let v = if op == B::InclusiveOr { a | c } else { a ^ c };
                V::I(v, v)
            } else {
                let m = b.max(d);
                let bits = 64 - (m as u64).leading_zeros();
                V::I(0, (1i64 << bits) - 1)
            }
        }
        B::LogicalAnd => V::I(a.min(c), b.min(d)),
        B::LogicalOr => V::I(a.max(c), b.max(d)),
        B::ShiftLeft if a >= 0 && c >= 0 && d < 32 => fit(out, w(a) << c, w(b) << d),
        B::ShiftRight if a >= 0 && c >= 0 && d < 32 => V::I(a >> d, b >> c),
        B::Less => cmp(b < c, a < d),
        B::LessEqual => cmp(b <= c, a <= d),
        B::Greater => cmp(a > d, b > c),
        B::GreaterEqual => cmp(a >= d, b >= c),
        B::Equal => cmp(a == b && c == d && a == c, !(b < c || d < a)),
        B::NotEqual => cmp(b < c || d < a, !(a == b && c == d && a == c)),
        _ => fit(out, i128::MIN, i128::MAX),
    }
}
