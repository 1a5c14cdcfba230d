# Makes the inputs of the Erlang formatting goldens (otp25_terms.jsonl,
# otp25_floats.txt): random JSON values shaped like reduce inputs, and f64
# bit patterns. Run it here, then format_cases.erl with the Erlang runtime
# of the CouchDB 3.4.3 release (OTP 25.2, with jiffy and couch on the code
# path), e.g. `erl -pa lib/*/ebin -noshell -eval "$(cat format_cases.erl)"`;
# otp25_floats.txt keeps the first 700 lines. The inputs are not kept.
import json, random, struct
random.seed(20261121)
STRS = ["", "a", "foo", "h\u00e9llo", "\u20ac", "a\nb\tc", "q\"x", "back\\slash", "\u00ff\u00a0", "\u0001", "x"*25, "k0001", "\u00e9", "A long string with spaces that will not fit on one line at all, really it will not"]
NUMS = [0, 1, -1, 255, 256, -256, 2147483647, 2147483648, -2147483648, -2147483649, 4294967296, 9007199254740993, 18446744073709551615, -9223372036854775808, 0.5, -2.5, 1.5e300, 0.0001, 1e-7, 123456.5, 100.0, 1e21, 3.0]
def rnd(depth=0):
    r = random.random()
    if depth > 3 or r < 0.35:
        c = random.random()
        if c < 0.1: return None
        if c < 0.2: return random.random() < 0.5
        if c < 0.6: return random.choice(NUMS) if random.random()<0.5 else random.randint(-300, 300)
        return random.choice(STRS)
    if r < 0.7:
        n = random.choice([0,1,2,3,5,8])
        if random.random() < 0.3:
            return [random.randint(0, 300) for _ in range(n)]
        return [rnd(depth+1) for _ in range(n)]
    n = random.choice([0,1,2,3,6])
    return {random.choice(["a","b","sum","count","k%d"%random.randint(0,99),"\u00e9","x y"]) + str(i): rnd(depth+1) for i in range(n)}
cases = []
fixed = [[10,20], [1,[10,20]], [[1,2],[3]], [2.5,3], [104,105], [10], [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30],
         {"x":list(range(1,31))}, {"x":["aa","bb","cc","dd","ee","ff","gg","hh","ii","jj","kk","ll"]}, {"a":1,"b":2,"c":3,"d":4,"e":5,"f":6},
         {"a":{"b":[1,"x"]}}, [{"a":1}], "\u20ac", {"error":"x"}, [5], [1000], ["ab", 1], [[1,2],[3,4]], list(range(250,300)), [256]*10]
for v in fixed: cases.append(v)
k=0
while k < 200:
    c = rnd()
    if len(json.dumps(c)) < 260:
        cases.append(c); k += 1
with open("cases.jsonl","w") as f:
    for c in cases: f.write(json.dumps(c, ensure_ascii=False)+"\n")
# floats as bit patterns
bits = []
specials = [0.0, -0.0, 1.0, 0.1, 0.0001, 1e-5, 100.0, 1000.0, 1230.0, 12300.0, 9007199254740991.0, 9007199254740992.0, 4503599627370497.0, 5e-324, 1.7976931348623157e308, 2.2250738585072014e-308, 123456.5, 0.3, 1e21, 1e22, 1e15, 1e16, 0.000123, 12345678.9]
for f in specials: bits.append(struct.unpack("<Q", struct.pack("<d", f))[0])
for _ in range(1500):
    k = random.random()
    if k < 0.4:
        b = random.getrandbits(64)
        e = (b >> 52) & 0x7ff
        if e == 0x7ff: continue
        bits.append(b)
    elif k < 0.7:
        f = random.uniform(-1e6, 1e6)
        f = round(f, random.randint(0, 8))
        bits.append(struct.unpack("<Q", struct.pack("<d", f))[0])
    else:
        f = float(random.randint(1, 10**random.randint(1, 18))) * 10.0 ** random.randint(-25, 25)
        bits.append(struct.unpack("<Q", struct.pack("<d", f))[0])
with open("floats.txt","w") as f:
    for b in bits: f.write("%d\n" % b)
print(len(cases), len(bits))
