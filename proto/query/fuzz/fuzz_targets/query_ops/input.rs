//! The top of the grammar: stored documents, `let` variables, `$$NOW`, and one case.

use libfuzzer_sys::arbitrary::{self, Arbitrary};

use crate::exprs::Ex;
use crate::filters::{Filter, Pred};
use crate::projections::Proj;
use crate::scalars::{DateV, Key};
use crate::sorts::Sort;
use crate::stages::Stage;
use crate::updates::UpdateCase;
use crate::values::Val;

#[derive(Arbitrary, Debug)]
pub enum Case {
    Filter(Filter),
    FilterValue(Pred),
    Update(UpdateCase),
    Projection(Proj, Option<u8>),
    Sort(Sort),
    Expr(Ex),
    Pipeline(Vec<Stage>),
}

#[derive(Arbitrary, Debug)]
pub struct Input {
    pub docs: Vec<Vec<(Key, Val)>>,
    pub vars: Vec<(u8, Val)>,
    pub now: DateV,
    pub case: Case,
}
