// A line diff (longest common subsequence) for comparing two versions of a text.

const MAX_CELLS = 4_000_000;

export function lineDiff(before, after) {
  const a = (before ?? "").split("\n");
  const b = (after ?? "").split("\n");
  if (a.length * b.length > MAX_CELLS) {
    return [...a.map((line) => ["-", line]), ...b.map((line) => ["+", line])];
  }
  const n = a.length;
  const m = b.length;
  const table = Array.from({ length: n + 1 }, () => new Uint32Array(m + 1));
  for (let i = n - 1; i >= 0; i -= 1) {
    for (let j = m - 1; j >= 0; j -= 1) {
      table[i][j] = a[i] === b[j] ? table[i + 1][j + 1] + 1 : Math.max(table[i + 1][j], table[i][j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) { out.push([" ", a[i]]); i += 1; j += 1; }
    else if (table[i + 1][j] >= table[i][j + 1]) { out.push(["-", a[i]]); i += 1; }
    else { out.push(["+", b[j]]); j += 1; }
  }
  while (i < n) { out.push(["-", a[i]]); i += 1; }
  while (j < m) { out.push(["+", b[j]]); j += 1; }
  return out;
}
