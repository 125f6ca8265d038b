//! One input: the stored documents and `let` variables are built first, then the case's
//! client document, which goes through the query crate's entry points.

use bson::{Bson, DateTime, Document};
use query::expr::Variables;

use crate::cases;
use crate::input::{Case, Input};
use crate::limits::{acceptable, MAX_DEPTH};
use crate::print::{print_enabled, show};
use crate::scalars::Key;
use crate::sort_case;
use crate::tables::{pick, IDENTS};
use crate::update_case;
use crate::values::{Cx, Val};

pub fn run(input: &Input) {
    let mut cx = Cx::default();
    let docs = stored_docs(&mut cx, &input.docs);
    let now = input.now.build();
    let vars = let_vars(&mut cx, &input.vars, now);
    if print_enabled() {
        print_setup(&mut cx, &input.vars, &docs);
    }
    // Each case builds the client's document at the depth it has in its command.
    match &input.case {
        Case::Filter(f) => cases::filter(&mut cx, f, &docs, &vars),
        Case::FilterValue(p) => cases::filter_value(&mut cx, p, &docs),
        Case::Update(uc) => update_case::update(&mut cx, uc, now, &docs, &vars),
        Case::Projection(p, pos) => cases::projection(&mut cx, p, *pos, &docs),
        Case::Sort(s) => sort_case::sort(&mut cx, s, &docs),
        Case::Expr(x) => cases::expr(&mut cx, x, &docs, &vars),
        Case::Pipeline(stages) => cases::pipeline(&mut cx, stages, docs, &vars),
    }
}

/// Stored documents: each has an _id, at most 100 levels, at most 16 MiB.
fn stored_docs(cx: &mut Cx, inputs: &[Vec<(Key, Val)>]) -> Vec<Document> {
    let mut docs = Vec::new();
    for (i, fields) in inputs.iter().take(6).enumerate() {
        let mut d = Document::new();
        d.insert("_id", i as i32);
        for (k, v) in fields {
            let v = cx.val(v, MAX_DEPTH);
            d.insert(k.build(), v);
        }
        if acceptable(&d, wire::MAX_BSON_SIZE) {
            docs.push(d);
        }
    }
    docs
}

fn let_vars(cx: &mut Cx, inputs: &[(u8, Val)], now: DateTime) -> Variables {
    let mut vars = Variables::new().with_now(now);
    for (n, v) in inputs {
        // `let` variables arrive in a command: {let: {x: v}}.
        vars.set(pick(IDENTS, *n), cx.val(v, MAX_DEPTH - 1));
    }
    vars
}

fn print_setup(cx: &mut Cx, vars: &[(u8, Val)], docs: &[Document]) {
    for (n, v) in vars {
        show(
            &format!("let {}", pick(IDENTS, *n)),
            &cx.val(v, MAX_DEPTH - 1),
        );
    }
    for d in docs {
        show("doc", &Bson::Document(d.clone()));
    }
}
