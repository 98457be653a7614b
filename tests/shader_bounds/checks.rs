//! The checks: every dynamic index into a fixed-size array or vector in range
//! ([`Analyzer::check_index`]), every cooperative load and store inside its workgroup array over
//! its whole extent ([`Analyzer::check_coop`]); what is not proved becomes a violation.

use super::{Analyzer, Fx, State};
use naga::{ArraySize, Expression as E, Handle, TypeInner};

impl Analyzer<'_> {
    pub(super) fn violation(&mut self, fx: &Fx, what: String) {
        let s = format!("{}: {what}", fx.name);
        if !self.report.violations.contains(&s) {
            self.report.violations.push(s);
        }
    }

    /// The fixed length of the array / vector that `base` (a pointer or a value) indexes, and
    /// whether it lives in workgroup memory; None for runtime-sized arrays (storage).
    fn indexed_len(&self, fx: &Fx, base: Handle<naga::Expression>) -> Option<(i64, bool)> {
        let t = self.ty(fx, base);
        let (inner, wg) = match t {
            TypeInner::Pointer { base, space } => (
                &self.m.types[*base].inner,
                *space == naga::AddressSpace::WorkGroup,
            ),
            TypeInner::ValuePointer {
                size: Some(s),
                space,
                ..
            } => return Some((*s as i64, *space == naga::AddressSpace::WorkGroup)),
            other => (other, false),
        };
        match inner {
            TypeInner::Array {
                size: ArraySize::Constant(n),
                ..
            } => Some((n.get() as i64, wg)),
            TypeInner::Vector { size, .. } => Some((*size as i64, wg)),
            TypeInner::Matrix { columns, .. } => Some((*columns as i64, wg)),
            _ => None,
        }
    }

    pub(super) fn check_index(&mut self, fx: &Fx, st: &State, h: Handle<naga::Expression>) {
        let E::Access { base, index } = fx.f.expressions[h] else {
            return;
        };
        let Some((len, wg)) = self.indexed_len(fx, base) else {
            return;
        };
        match self.int(fx, st, index) {
            Some((lo, hi)) if lo >= 0 && hi < len => {
                self.report.indices.insert((fx.name.clone(), h, wg));
            }
            r => self.violation(
                fx,
                format!("index {index:?} of {h:?} in {r:?}, length {len}"),
            ),
        }
    }

    /// A cooperative load / store through `pointer` (&array[i]) with `stride`: every element
    /// of the 16x16 (or 8x8) extent, i + (n - 1) * stride + (n - 1), lies in the array.
    pub(super) fn check_coop(
        &mut self,
        fx: &Fx,
        st: &State,
        pointer: Handle<naga::Expression>,
        stride: Handle<naga::Expression>,
        n: i64,
    ) {
        let (base, idx) = match fx.f.expressions[pointer] {
            E::Access { base, index } => (base, self.int(fx, st, index)),
            E::AccessIndex { base, index } => (base, Some((index as i64, index as i64))),
            _ => {
                self.violation(
                    fx,
                    format!("cooperative access through {pointer:?}: not &array[i]"),
                );
                return;
            }
        };
        let Some((len, true)) = self.indexed_len(fx, base) else {
            // Storage rows (kernel k64p's A): robust buffer access, not checked here.
            return;
        };
        match (idx, self.int(fx, st, stride)) {
            (Some((lo, hi)), Some((_, s))) if lo >= 0 && hi + (n - 1) * s + (n - 1) < len => {
                self.report.coop_extents.insert((fx.name.clone(), pointer));
            }
            (i, s) => self.violation(
                fx,
                format!("cooperative access at {i:?} stride {s:?} (n {n}), length {len}"),
            ),
        }
    }
}
