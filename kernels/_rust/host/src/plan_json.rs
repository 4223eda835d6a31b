//! The span plan rust_native executes, read from the JSON of `mage.timing.SpanPlan.to_json()`:
//! an object of numbers and one list of [round, passes] pairs. A small reader for exactly that
//! (the crate has no dependencies), strict about what it does not know.

/// mage.timing.SpanPlan: warm `warmup` calls and at least `warm_s` seconds, `lead_in` untimed passes,
/// then `blocks` in order, a block (r, k) being k timed passes of round r.
#[derive(Debug, PartialEq)]
pub struct SpanPlan {
    pub rounds: usize,
    pub per_round: usize,
    pub block: usize,
    pub warmup: usize,
    pub warm_s: f64,
    pub lead_in: usize,
    pub blocks: Vec<(usize, usize)>,
}

#[derive(Debug)]
enum Json {
    Num(f64),
    List(Vec<Json>),
}

struct Reader<'a> {
    s: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn ws(&mut self) {
        while self.s.get(self.at).is_some_and(|c| c.is_ascii_whitespace()) {
            self.at += 1;
        }
    }
    fn eat(&mut self, c: u8) -> Result<(), String> {
        self.ws();
        if self.s.get(self.at) == Some(&c) {
            self.at += 1;
            Ok(())
        } else {
            Err(format!("expected '{}' at byte {}", c as char, self.at))
        }
    }
    fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.s.get(self.at).copied()
    }
    fn key(&mut self) -> Result<String, String> {
        self.eat(b'"')?;
        let start = self.at;
        while self.s.get(self.at).is_some_and(|&c| c != b'"') {
            self.at += 1;
        }
        let k = String::from_utf8_lossy(&self.s[start..self.at]).into_owned();
        self.eat(b'"')?;
        Ok(k)
    }
    fn value(&mut self) -> Result<Json, String> {
        if self.peek() == Some(b'[') {
            self.at += 1;
            let mut items = Vec::new();
            if self.peek() == Some(b']') {
                self.at += 1;
                return Ok(Json::List(items));
            }
            loop {
                items.push(self.value()?);
                match self.peek() {
                    Some(b',') => self.at += 1,
                    Some(b']') => {
                        self.at += 1;
                        return Ok(Json::List(items));
                    }
                    _ => return Err(format!("expected ',' or ']' at byte {}", self.at)),
                }
            }
        }
        let start = self.at;
        while self.s.get(self.at).is_some_and(|c| c.is_ascii_digit() || b"+-.eE".contains(c)) {
            self.at += 1;
        }
        let text = std::str::from_utf8(&self.s[start..self.at]).unwrap_or("");
        text.parse().map(Json::Num).map_err(|_| format!("expected a number or a list at byte {start}"))
    }
}

fn count(v: &Json, what: &str) -> Result<usize, String> {
    match v {
        Json::Num(x) if *x >= 0.0 && x.fract() == 0.0 && *x < 1e9 => Ok(*x as usize),
        _ => Err(format!("{what} must be a whole number >= 0, got {v:?}")),
    }
}

/// The plan in `text`; every field must be present, the blocks must fit the rounds, and each round
/// must get `per_round` passes.
pub fn parse_plan(text: &str) -> Result<SpanPlan, String> {
    let mut r = Reader { s: text.as_bytes(), at: 0 };
    let mut fields = std::collections::BTreeMap::new();
    r.eat(b'{')?;
    if r.peek() != Some(b'}') {
        loop {
            let k = r.key()?;
            r.eat(b':')?;
            fields.insert(k, r.value()?);
            if r.peek() == Some(b',') {
                r.at += 1;
            } else {
                break;
            }
        }
    }
    r.eat(b'}')?;
    if r.peek().is_some() {
        return Err(format!("trailing text at byte {}", r.at));
    }
    let known = ["rounds", "per_round", "block", "warmup", "warm_s", "lead_in", "blocks"];
    if let Some(k) = fields.keys().find(|k| !known.contains(&k.as_str())) {
        return Err(format!("unknown field {k:?}"));
    }
    let get = |k: &str| fields.get(k).ok_or(format!("missing field {k:?}"));
    let warm_s = match get("warm_s")? {
        Json::Num(x) if *x >= 0.0 => *x,
        v => return Err(format!("warm_s must be a number >= 0, got {v:?}")),
    };
    let mut blocks = Vec::new();
    let Json::List(items) = get("blocks")? else {
        return Err("blocks must be a list of [round, passes]".into());
    };
    for b in items {
        match b {
            Json::List(p) if p.len() == 2 => blocks.push((count(&p[0], "a block's round")?, count(&p[1], "passes")?)),
            _ => return Err(format!("a block must be [round, passes], got {b:?}")),
        }
    }
    let plan = SpanPlan {
        rounds: count(get("rounds")?, "rounds")?,
        per_round: count(get("per_round")?, "per_round")?,
        block: count(get("block")?, "block")?,
        warmup: count(get("warmup")?, "warmup")?,
        warm_s,
        lead_in: count(get("lead_in")?, "lead_in")?,
        blocks,
    };
    let mut taken = vec![0usize; plan.rounds];
    for &(round, k) in &plan.blocks {
        *taken.get_mut(round).ok_or(format!("block of round {round}, but there are {} rounds", plan.rounds))? += k;
    }
    if let Some(r) = taken.iter().position(|&t| t != plan.per_round) {
        return Err(format!("round {r} gets {} passes, not per_round = {}", taken[r], plan.per_round));
    }
    Ok(plan)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_what_mage_timing_writes() {
        let text = r#"{"block": 2, "blocks": [[0, 2], [1, 2], [1, 1], [0, 1]], "lead_in": 2, "per_round": 3,
                       "rounds": 2, "warm_s": 0.25, "warmup": 10}"#;
        let p = parse_plan(text).unwrap();
        assert_eq!(p.blocks, vec![(0, 2), (1, 2), (1, 1), (0, 1)]);
        assert_eq!((p.rounds, p.per_round, p.lead_in, p.warmup, p.warm_s), (2, 3, 2, 10, 0.25));
    }

    #[test]
    fn refuses_what_it_cannot_execute() {
        let ok = r#""block": 1, "lead_in": 1, "per_round": 1, "rounds": 1, "warm_s": 0, "warmup": 1"#;
        assert!(parse_plan(&format!("{{{ok}, \"blocks\": [[0, 1]]}}")).is_ok());
        assert!(parse_plan(&format!("{{{ok}, \"blocks\": [[1, 1]]}}")).unwrap_err().contains("rounds"));
        assert!(parse_plan(&format!("{{{ok}, \"blocks\": [[0, 2]]}}")).unwrap_err().contains("per_round"));
        assert!(parse_plan(&format!("{{{ok}, \"blocks\": [[0, 1]], \"x\": 1}}")).unwrap_err().contains("unknown"));
        assert!(parse_plan(&format!("{{{ok}}}")).unwrap_err().contains("blocks"));
        assert!(parse_plan("{\"rounds\": -1}").is_err());
        assert!(parse_plan("[]").is_err());
    }
}
