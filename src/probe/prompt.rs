//! Needle prompts of an exact token length: a haystack (a built-in neutral filler, or a file),
//! the needle (a key and a value drawn from (seed, trial)), the question at the end; the
//! haystack's length searched until the server's own token count is the cell's.

use super::ProbeError;
use rand::Rng;

/// The built-in haystack: RULER's neutral "noise" filler (`niah` with `type_haystack: noise`),
/// repeated as long as needed.
pub(crate) const NOISE_HAYSTACK: &str =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

/// The instruction before the haystack (RULER's niah template).
pub(crate) const PREAMBLE: &str = "Some special magic numbers are hidden within the following text. Make sure to memorize it. I will quiz you about the numbers afterwards.\n";

/// Words the needle keys are made of.
const KEY_WORDS: &[&str] = &[
    "amber", "basil", "cedar", "delta", "ember", "fjord", "garnet", "harbor", "indigo", "juniper", "kestrel",
    "lantern", "meadow", "nectar", "onyx", "pepper", "quartz", "raven", "saffron", "timber", "umber", "velvet",
    "willow", "yarrow", "zephyr", "falcon", "copper", "silver", "maple", "orchid", "thistle", "lagoon",
];

/// A trial's needle: `key` and `value`, drawn only from (seed, trial).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Needle {
    /// What the question asks for.
    pub(crate) key: String,
    /// The answer: a 7-digit number.
    pub(crate) value: String,
}

impl Needle {
    /// The needle of trial `trial` of a run seeded `seed` (the same in every cell and condition,
    /// so that conditions compare the same prompts).
    pub fn draw(seed: u64, trial: u64) -> Needle {
        let mut rng = crate::trials::trial_rng(seed, trial);
        let a = KEY_WORDS[rng.random_range(0..KEY_WORDS.len())];
        let mut b = KEY_WORDS[rng.random_range(0..KEY_WORDS.len())];
        while b == a {
            b = KEY_WORDS[rng.random_range(0..KEY_WORDS.len())];
        }
        Needle { key: format!("{a}-{b}"), value: rng.random_range(1_000_000u32..10_000_000).to_string() }
    }

    /// The sentence planted in the haystack.
    pub fn sentence(&self) -> String {
        format!(" One of the special magic numbers for {} is: {}.", self.key, self.value)
    }

    /// The question after the haystack.
    pub fn question(&self) -> String {
        format!(
            "\nWhat is the special magic number for {} mentioned in the provided text? The special magic number for {} mentioned in the provided text is",
            self.key, self.key
        )
    }
}

/// A prompt's shape (`--template`): the text before the haystack, the needle sentence planted in
/// it, the question after it and an answer prefix, with `{key}` and `{value}` placeholders.
/// Every template is scored alike: a hit is an answer containing the needle's value (RULER's
/// string_match_all), whatever scorer the harness it imitates uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Template {
    /// `ruler`, `gkamradt`, or the file's name.
    pub(crate) name: String,
    /// Before the haystack.
    pub(crate) preamble: String,
    /// The needle sentence: `{key}` and `{value}`.
    pub(crate) needle: String,
    /// After the haystack: `{key}`.
    pub(crate) question: String,
    /// After the question (the start of the answer).
    pub(crate) answer_prefix: String,
    /// The template's own filler text, if it has one.
    pub(crate) haystack: Option<String>,
}

/// Most characters a template's part may have.
const MAX_TEMPLATE_PART: usize = 4096;

impl Template {
    /// RULER's niah shape (the default): its instruction, "One of the special magic numbers for
    /// KEY is: VALUE.", and its question with the answer's start.
    pub(crate) fn ruler() -> Template {
        Template {
            name: "ruler".into(),
            preamble: PREAMBLE.into(),
            needle: " One of the special magic numbers for {key} is: {value}.".into(),
            question: "\nWhat is the special magic number for {key} mentioned in the provided text? The special magic number for {key} mentioned in the provided text is".into(),
            answer_prefix: String::new(),
            haystack: None,
        }
    }

    /// gkamradt's LLMTest_NeedleInAHaystack shape with its random-city needle ("The special
    /// magic CITY number is: N.", the key a word pair here), its system line before the context
    /// and its instruction after the question. That harness scores with an LLM judge; the probe
    /// scores by the value, as for every template.
    pub(crate) fn gkamradt() -> Template {
        Template {
            name: "gkamradt".into(),
            preamble: "You are a helpful AI bot that answers questions for a user. Keep your response short and direct.\n".into(),
            needle: " The special magic {key} number is: {value}.".into(),
            question: "\n\nWhat is the special magic {key} number? Don't give information outside the document or repeat your findings.".into(),
            answer_prefix: "\nAnswer:".into(),
            haystack: None,
        }
    }

    /// `--template`: `ruler`, `gkamradt`, or a TOML file's text (`name` for messages) with the
    /// keys `preamble`, `needle`, `question`, `answer_prefix` and `haystack` (optional).
    pub(crate) fn from_toml(text: &str, name: &str) -> Result<Template, ProbeError> {
        let bad = |m: String| ProbeError::input(format!("--template {name}: {m}"));
        let v: toml::Table = text.parse().map_err(|e: toml::de::Error| bad(e.message().to_string()))?;
        const KEYS: &[&str] = &["preamble", "needle", "question", "answer_prefix", "haystack"];
        if let Some(k) = v.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(bad(format!("unknown key `{k}` (allowed: {})", KEYS.join(", "))));
        }
        let get = |k: &str| -> Result<Option<String>, ProbeError> {
            match v.get(k) {
                None => Ok(None),
                Some(toml::Value::String(s)) if s.chars().count() <= MAX_TEMPLATE_PART || k == "haystack" => {
                    Ok(Some(s.clone()))
                }
                Some(toml::Value::String(_)) => {
                    Err(bad(format!("`{k}` is longer than {MAX_TEMPLATE_PART} characters")))
                }
                Some(_) => Err(bad(format!("`{k}` must be a string"))),
            }
        };
        let t = Template {
            name: name.to_string(),
            preamble: get("preamble")?.unwrap_or_default(),
            needle: get("needle")?
                .ok_or_else(|| bad("no `needle` (e.g. needle = \" The code for {key} is {value}.\")".into()))?,
            question: get("question")?
                .ok_or_else(|| bad("no `question` (e.g. question = \"\\nWhat is the code for {key}?\")".into()))?,
            answer_prefix: get("answer_prefix")?.unwrap_or_default(),
            haystack: get("haystack")?,
        };
        t.check().map_err(bad)?;
        Ok(t)
    }

    /// The placeholders where they must be: the needle has `{key}` and `{value}`, the question
    /// `{key}`, and nothing but the needle holds `{value}` (the answer would be in the question).
    fn check(&self) -> Result<(), String> {
        if !self.needle.contains("{key}") || !self.needle.contains("{value}") {
            return Err("`needle` must contain {key} and {value}".into());
        }
        if !self.question.contains("{key}") {
            return Err("`question` must contain {key} (which needle it asks for)".into());
        }
        for (k, t) in
            [("preamble", &self.preamble), ("question", &self.question), ("answer_prefix", &self.answer_prefix)]
        {
            if t.contains("{value}") {
                return Err(format!("`{k}` contains {{value}}: only the needle may hold the answer"));
            }
        }
        Ok(())
    }

    /// `ruler`, `gkamradt`, or a file read from disk.
    pub(crate) fn parse(spec: &str) -> Result<Template, ProbeError> {
        match spec.trim() {
            "ruler" => Ok(Template::ruler()),
            "gkamradt" => Ok(Template::gkamradt()),
            path => {
                let text = crate::input::read_to_string(std::path::Path::new(path))
                    .map_err(|e| ProbeError::input(format!("--template {path}: {e} (built in: ruler, gkamradt)")))?;
                Template::from_toml(&text, path)
            }
        }
    }

    /// The needle sentence of `n`.
    pub(crate) fn sentence(&self, n: &Needle) -> String {
        self.needle.replace("{key}", &n.key).replace("{value}", &n.value)
    }

    /// The question (and answer prefix) of `n`.
    pub(crate) fn question(&self, n: &Needle) -> String {
        format!("{}{}", self.question.replace("{key}", &n.key), self.answer_prefix)
    }

    /// A fingerprint of the template (FNV-1a), so that `--resume` refuses another.
    pub(crate) fn digest(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for part in [&self.preamble, &self.needle, &self.question, &self.answer_prefix] {
            for b in part.bytes().chain(std::iter::once(0u8)) {
                h ^= b as u64;
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
        format!("{h:016x}")
    }
}

/// The words of a haystack: the built-in filler or a file's text, split on whitespace; and the
/// prompt's template.
#[derive(Debug, Clone)]
pub struct Haystack {
    words: Vec<String>,
    /// Where the text came from (`built-in noise` or the file), for the provenance.
    pub(crate) name: String,
    /// The prompt's shape ([`Template::ruler`] unless `--template` says otherwise).
    pub(crate) template: Template,
}

impl Haystack {
    /// The built-in neutral filler.
    pub fn noise() -> Haystack {
        Haystack::from_text(NOISE_HAYSTACK, "built-in noise (RULER)")
            .expect("NOISE_HAYSTACK has more than the 10 words from_text needs")
    }

    /// A haystack from a text (`name` for messages). At least 50 words.
    pub(crate) fn from_text(text: &str, name: &str) -> Result<Haystack, ProbeError> {
        let words: Vec<String> = text.split_whitespace().map(str::to_string).collect();
        if words.len() < 10 {
            return Err(ProbeError::input(format!("--haystack {name}: {} words; at least 10 are needed", words.len())));
        }
        Ok(Haystack { words, name: name.to_string(), template: Template::ruler() })
    }

    /// A fingerprint of the text (FNV-1a), so that `--resume` refuses another haystack.
    pub(crate) fn digest(&self) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for w in &self.words {
            for b in w.bytes().chain(std::iter::once(b' ')) {
                h ^= b as u64;
                h = h.wrapping_mul(0x0100_0000_01b3);
            }
        }
        format!("{h:016x}")
    }

    fn word(&self, i: usize) -> &str {
        &self.words[i % self.words.len()]
    }

    /// Whether word `i` ends a sentence (where a needle may go).
    fn ends_sentence(&self, i: usize) -> bool {
        self.word(i).ends_with(['.', '!', '?'])
    }
}

/// A built prompt: the text, and where its needle copies are (byte offsets).
#[derive(Debug, Clone, PartialEq)]
pub struct Prompt {
    /// The whole prompt text (the user message in chat mode).
    pub text: String,
    /// Byte offset of each needle sentence in `text`.
    pub needle_at: Vec<usize>,
    /// Byte length of the needle sentence.
    pub needle_len: usize,
    /// Haystack words used.
    pub words: usize,
    /// The haystack's first word.
    pub skip: usize,
}

impl Prompt {
    /// The text up to the first needle.
    pub fn before_needle(&self) -> &str {
        &self.text[..self.needle_at[0]]
    }
    /// The text up to the end of the first needle.
    pub(crate) fn through_needle(&self) -> &str {
        &self.text[..self.needle_at[0] + self.needle_len]
    }
}

/// Builds the prompt with `words` haystack words, the needle's `repeat` copies placed as the
/// model's `spread` layout places them (one copy: at `depth`; copy j of r at (j + 0.5) / r), each
/// after the sentence that ends at or after its position.
pub fn build(hay: &Haystack, words: usize, depth: f64, repeat: u32, needle: &Needle) -> Prompt {
    build_from(hay, 0, words, depth, repeat, needle)
}

/// [`build`] with the haystack starting at its word `skip` (another phase of the filler: a
/// finer step of the length search where one more word adds more than one token).
pub fn build_from(hay: &Haystack, skip: usize, words: usize, depth: f64, repeat: u32, needle: &Needle) -> Prompt {
    let r = repeat.max(1) as usize;
    let mut at: Vec<usize> = (0..r)
        .map(|j| {
            let f = if r == 1 { depth } else { (j as f64 + 0.5) / r as f64 };
            let mut w = ((f * words as f64).floor() as usize).min(words);
            // Move to the end of a sentence (never past the haystack's end).
            while w > 0 && w < words && !hay.ends_sentence(skip + w - 1) {
                w += 1;
            }
            w
        })
        .collect();
    at.dedup();
    let t = &hay.template;
    let sentence = t.sentence(needle);
    let mut text = String::with_capacity(t.preamble.len() + words * 7 + r * sentence.len() + 200);
    text.push_str(&t.preamble);
    let mut needle_at = Vec::with_capacity(at.len());
    let mut next = at.iter().peekable();
    for i in 0..=words {
        while next.peek().is_some_and(|&&w| w == i) {
            needle_at.push(text.len());
            text.push_str(&sentence);
            next.next();
        }
        if i < words {
            if i > 0 || !(text.is_empty() || text.ends_with('\n')) {
                text.push(' ');
            }
            text.push_str(hay.word(skip + i));
        }
    }
    text.push_str(&t.question(needle));
    // A needle at the very start follows the preamble's newline: no leading space then.
    Prompt { text, needle_at, needle_len: sentence.len(), words, skip }
}

/// The outcome of a length search.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    /// Haystack words.
    pub words: usize,
    /// The haystack's first word ([`build_from`]).
    pub skip: usize,
    /// The count at those words.
    pub tokens: u64,
    /// Counts asked for.
    pub evaluations: u32,
}

/// Whether `tokens` is within ±1% of `target`.
pub fn within(tokens: u64, target: u64) -> bool {
    tokens.abs_diff(target) as f64 <= 0.01 * target as f64
}

/// Most haystack words a prompt of `target` tokens is built with: a filler word is at least a
/// quarter of a token in any tokenizer, so more words than this means the server's counts are
/// not this prompt's (zero, or jumping between requests); the search stops there instead of
/// building ever longer prompts.
pub(crate) fn max_words(target: u64) -> usize {
    usize::try_from(target.saturating_mul(4).saturating_add(1024)).unwrap_or(usize::MAX)
}

/// Most counts the secant phase of a search asks for.
pub(crate) const MAX_EVALUATIONS: u32 = 24;
/// Phases of the filler tried when no word count hits the target exactly.
const SKIPS: usize = 4;

/// Finds the haystack words whose prompt counts `target` tokens (`count(words)`: the server's
/// count of the prompt with that many words), starting from `start` words: secant steps, then
/// single words towards the target. Returns the exact count when one is found, else the closest
/// within ±1%; an error when none is within ±1% after `MAX_EVALUATIONS` counts.
pub fn search(
    target: u64,
    start: usize,
    count: &mut dyn FnMut(usize, usize) -> Result<u64, ProbeError>,
) -> Result<Found, ProbeError> {
    let mut evals = 0u32;
    let mut eval = |w: usize, evals: &mut u32| -> Result<u64, ProbeError> {
        *evals += 1;
        count(w, 0)
    };
    let mut w = start.clamp(1, max_words(target));
    let mut p = eval(w, &mut evals)?;
    let mut best = Found { words: w, skip: 0, tokens: p, evaluations: evals };
    let better = |a: &Found, t: u64, p: u64| p.abs_diff(t) < a.tokens.abs_diff(t);
    let mut prev: Option<(usize, u64)> = None;
    while p != target && evals < MAX_EVALUATIONS {
        // Tokens per word from the last two counts (or from this one alone).
        let slope = match prev {
            Some((w0, p0)) if w0 != w && p0 != p => (p as f64 - p0 as f64) / (w as f64 - w0 as f64),
            _ => (p as f64 / w as f64).max(0.05),
        };
        let slope = slope.clamp(0.05, 64.0);
        let step = (target as f64 - p as f64) / slope;
        let mut next = (w as f64 + step).round();
        if (next - w as f64).abs() < 1.0 {
            next = if target > p { w as f64 + 1.0 } else { w as f64 - 1.0 };
        }
        let next = next.clamp(1.0, (w as f64 * 8.0).max(64.0).min(max_words(target) as f64)) as usize;
        if next == w || prev.is_some_and(|(w0, _)| w0 == next) && within(best.tokens, target) {
            break;
        }
        prev = Some((w, p));
        w = next;
        p = eval(w, &mut evals)?;
        if better(&best, target, p) {
            best = Found { words: w, skip: 0, tokens: p, evaluations: evals };
        }
    }
    // Not exact (one more word adds more than one token there): other phases of the filler.
    'phases: for skip in 1..SKIPS {
        for dw in [0i64, -1, 1] {
            if best.tokens == target || evals >= MAX_EVALUATIONS + 3 * SKIPS as u32 {
                break 'phases;
            }
            let w = (best.words as i64 + dw).max(1) as usize;
            evals += 1;
            let p = count(w, skip)?;
            if better(&best, target, p) {
                best = Found { words: w, skip, tokens: p, evaluations: evals };
            }
        }
    }
    best.evaluations = evals;
    if !within(best.tokens, target) {
        return Err(ProbeError::failure(format!(
            "cannot build a prompt of {target} tokens: the closest was {} tokens ({} haystack words) after {evals} counts",
            best.tokens, best.words
        )));
    }
    Ok(best)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needles_repeat_from_the_seed() {
        assert_eq!(Needle::draw(7, 3), Needle::draw(7, 3));
        assert_ne!(Needle::draw(7, 3), Needle::draw(7, 4));
        assert_eq!(Needle::draw(7, 3).value.len(), 7);
    }

    #[test]
    fn needle_sits_at_a_sentence_end_near_its_depth() {
        let h = Haystack::noise();
        let n = Needle::draw(1, 0);
        let p = build(&h, 1000, 0.5, 1, &n);
        assert_eq!(p.needle_at.len(), 1);
        let before = p.before_needle();
        assert!(before.ends_with('.'), "{}", &before[before.len() - 20..]);
        let frac = before.len() as f64 / p.text.len() as f64;
        assert!((frac - 0.5).abs() < 0.05, "{frac}");
        assert!(p.text.ends_with("provided text is"));
        assert_eq!(p.text.matches(&n.value).count(), 1);
        let p = build(&h, 1000, 0.5, 4, &n);
        assert_eq!(p.text.matches(&n.value).count(), 4);
        let p0 = build(&h, 1000, 0.0, 1, &n);
        assert!(p0.text[p0.needle_at[0]..].starts_with(" One of"));
    }

    #[test]
    fn templates_build_their_shape() {
        let n = Needle::draw(1, 0);
        // The RULER template is the needle's own sentence and question, byte for byte.
        let r = Template::ruler();
        assert_eq!((r.sentence(&n), r.question(&n)), (n.sentence(), n.question()));
        let mut h = Haystack::noise();
        h.template = Template::gkamradt();
        let p = build(&h, 400, 0.5, 1, &n);
        assert!(p.text.starts_with("You are a helpful AI bot"));
        assert!(p.text.ends_with("repeat your findings.\nAnswer:"), "{}", &p.text[p.text.len() - 80..]);
        assert_eq!(p.text.matches(&n.value).count(), 1);
        assert!(p.text[p.needle_at[0]..].starts_with(&format!(" The special magic {} number is: {}.", n.key, n.value)));
        let t = Template::from_toml(
            "needle = \"The code for {key} is {value}.\"\nquestion = \"\\nThe code for {key}?\"\n",
            "t.toml",
        )
        .unwrap();
        assert_eq!(t.sentence(&n), format!("The code for {} is {}.", n.key, n.value));
        for bad in [
            "needle = \"{key}\"\nquestion = \"{key}\"",
            "needle = \"{key} {value}\"\nquestion = \"{value} {key}\"",
            "needle = \"{key} {value}\"",
            "needle = 3\nquestion = \"{key}\"",
            "x = \"\"",
        ] {
            let e = Template::from_toml(bad, "t.toml").unwrap_err();
            assert!(e.message.starts_with("--template t.toml: "), "{}", e.message);
        }
    }

    #[test]
    fn search_hits_the_target_exactly_when_it_can() {
        // About 1.3 tokens a word plus 40 of overhead, with a wobble.
        let mut count = |w: usize, s: usize| -> Result<u64, ProbeError> {
            Ok(40 + (w as u64 * 13) / 10 + (w as u64 % 3) + s as u64)
        };
        let f = search(16000, 100, &mut count).unwrap();
        assert!(within(f.tokens, 16000), "{f:?}");
        assert!(f.evaluations <= MAX_EVALUATIONS + 12);
        let mut exact = |w: usize, _: usize| -> Result<u64, ProbeError> { Ok(17 + w as u64) };
        let f = search(4003, 10, &mut exact).unwrap();
        assert_eq!((f.tokens, f.words), (4003, 3986));
        let mut coarse = |w: usize, _: usize| -> Result<u64, ProbeError> { Ok(w as u64 * 1000) };
        assert!(search(1500, 1, &mut coarse).is_err());
    }
}
