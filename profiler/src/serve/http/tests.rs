//! Query parsing under fuzzing: random query strings (through the same
//! decoding the handlers use) and random decoded parameters, a few
//! thousand of each from a fixed seed, so a failure replays. No input may
//! panic; every answer is either a valid query or one line of 400.

use super::*;

/// xorshift64*: a fixed, dependency-free stream of pseudo-random numbers.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
}

/// Any fixed non-zero seed.
const SEED: u64 = 0x10c4_f00d_5eed_0001;
const WINDOW: Duration = Duration::from_secs(60);
const ALLOWED: [&[&str]; 2] = [&["seconds"], &["seconds", "metric"]];

/// Pieces of query strings: names, values, encodings good and broken.
const KEYS: &[&str] = &["seconds", "metric", "Seconds", "secs", "", "metric[]", "seconds%00", "se%63onds", "m+etric"];
const VALUES: &[&str] = &[
    "1",
    "60",
    "61",
    "0",
    "-1",
    "+5",
    "%2B5",
    "5%20",
    " 7",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    "1e3",
    "0x10",
    "wait",
    "hold",
    "count",
    "blame",
    "WAIT",
    "%77ait",
    "%",
    "%Z",
    "%ZZ",
    "%FF",
    "%C3%A9",
    "%F0%9F%94%92",
    "%0A",
    "%0D%0A",
    "%00",
    "+",
    "",
    "=",
    "a=b",
];
const GLUE: &[&str] = &["&", "&", "&", ";", "&&", "=", "%26", "#", "?"];

fn random_query(rng: &mut Rng) -> String {
    let mut q = String::new();
    for i in 0..rng.below(5) {
        if i > 0 {
            q.push_str(rng.pick(GLUE));
        }
        q.push_str(rng.pick(KEYS));
        match rng.below(6) {
            0 => {}
            1 => q.push_str(&format!("={}", rng.next() >> rng.below(64))),
            _ => {
                q.push('=');
                q.push_str(rng.pick(VALUES));
            }
        }
    }
    q
}

/// Any string: ASCII, controls, multi-byte characters.
fn random_string(rng: &mut Rng) -> String {
    let pool =
        ['a', 's', '1', '0', '9', ' ', '\n', '\r', '\0', '"', '\\', '%', '+', '-', 'é', '🔒', '\u{7f}', '\u{202e}'];
    match rng.below(4) {
        0 => rng.pick(KEYS).to_string(),
        1 => rng.pick(VALUES).to_string(),
        _ => (0..rng.below(12)).map(|_| pool[rng.below(pool.len())]).collect(),
    }
}

/// What every answer must satisfy, whatever the input.
fn check(params: &[(String, String)], allowed: &[&str], got: &Result<ProfileQuery, HttpError>, input: &str) {
    match got {
        Ok(q) => {
            assert!(params.iter().all(|(k, _)| allowed.contains(&k.as_str())), "{input:?}: an unknown name passed");
            let mut names: Vec<&str> = params.iter().map(|(k, _)| k.as_str()).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), params.len(), "{input:?}: a repeated name passed");
            if let Some(n) = q.seconds {
                assert!((1..=WINDOW.as_secs()).contains(&n), "{input:?}: seconds={n} outside the window");
            }
            let metric = params.iter().find(|(k, _)| k == "metric").map(|(_, v)| ProfileMetric::parse(v));
            assert_eq!(metric.unwrap_or(Ok(ProfileMetric::Wait)), Ok(q.metric), "{input:?}: metric");
        }
        Err(HttpError(status, msg)) => {
            assert_eq!(*status, StatusCode::BAD_REQUEST, "{input:?}: {msg}");
            assert!(!msg.is_empty() && !msg.contains(['\n', '\r']), "{input:?}: not one line: {msg:?}");
        }
    }
}

#[test]
fn random_query_strings_get_a_query_or_one_line_of_400() {
    let mut rng = Rng(SEED);
    let (mut parsed, mut valid, mut rejected) = (0, 0, 0);
    for _ in 0..5_000 {
        let q = random_query(&mut rng);
        // What hyper would have refused before routing never reaches the handler.
        let Ok(uri) = format!("/debug/pprof/lockprof?{q}").parse::<Uri>() else { continue };
        parsed += 1;
        for allowed in ALLOWED {
            let got = query_of(&uri, allowed, WINDOW);
            match Query::<Vec<(String, String)>>::try_from_uri(&uri) {
                Ok(Query(params)) => check(&params, allowed, &got, &q),
                Err(_) => assert!(got.is_err(), "{q:?}: undecodable yet accepted"),
            }
            if got.is_ok() { valid += 1 } else { rejected += 1 }
        }
    }
    // The generator reaches both outcomes, through the URI parser.
    assert!(parsed > 4_000, "only {parsed} of 5000 query strings were URIs");
    assert!(valid > 500 && rejected > 500, "{valid} valid, {rejected} rejected");
}

#[test]
fn random_parameters_get_a_query_or_one_line_of_400() {
    let mut rng = Rng(SEED ^ 0x9e37_79b9_7f4a_7c15);
    let (mut valid, mut rejected) = (0, 0);
    for _ in 0..5_000 {
        let params: Vec<(String, String)> =
            (0..rng.below(4)).map(|_| (random_string(&mut rng), random_string(&mut rng))).collect();
        for allowed in ALLOWED {
            let got = parse_query(&params, allowed, WINDOW);
            check(&params, allowed, &got, &format!("{params:?}"));
            if got.is_ok() { valid += 1 } else { rejected += 1 }
        }
    }
    assert!(valid > 500 && rejected > 500, "{valid} valid, {rejected} rejected");
}
