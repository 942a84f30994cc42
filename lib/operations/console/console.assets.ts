// The console's only stylesheet and script, served by the console itself: no build step and
// nothing fetched from elsewhere, which also lets the Content-Security-Policy allow 'self' only.

export const CONSOLE_CSS = `
:root { color-scheme: light dark; --fg: #1d2433; --muted: #6b7280; --line: #d9dde5; --accent: #2457c5; --danger: #b42318; --ok: #1a7f37; --bg: #fff; --head: #f4f6fa; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6e9ef; --muted: #9aa3b2; --line: #363c48; --accent: #8ab4ff; --danger: #ff8a80; --ok: #6fdd8b; --bg: #15181e; --head: #1e222a; } }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, sans-serif; color: var(--fg); background: var(--bg); }
header { display: flex; gap: 1.5rem; align-items: center; padding: .6rem 1.2rem; border-bottom: 1px solid var(--line); background: var(--head); flex-wrap: wrap; }
nav { display: flex; gap: 1rem; flex-wrap: wrap; }
a { color: var(--accent); }
main { padding: 1rem 1.2rem 3rem; max-width: 1400px; }
h1 { font-size: 1.35rem; word-break: break-all; }
h2 { font-size: 1.05rem; margin-top: 1.6rem; }
table { border-collapse: collapse; width: 100%; margin: .5rem 0; }
th, td { border-bottom: 1px solid var(--line); padding: .35rem .5rem; text-align: left; vertical-align: top; }
th { background: var(--head); font-weight: 600; }
table.fields th { width: 14rem; }
td.error { color: var(--danger); max-width: 32rem; overflow-wrap: anywhere; }
pre { background: var(--head); border: 1px solid var(--line); padding: .8rem; overflow: auto; max-height: 60vh; white-space: pre-wrap; overflow-wrap: anywhere; }
.muted { color: var(--muted); }
.badge { display: inline-block; padding: 0 .45rem; border: 1px solid var(--line); border-radius: .6rem; font-size: .8rem; }
.notice { padding: .6rem .8rem; border-left: 4px solid var(--danger); background: var(--head); }
.filters, .bulk { display: flex; gap: .6rem; flex-wrap: wrap; align-items: end; margin: .6rem 0; }
label { display: flex; flex-direction: column; font-size: .8rem; color: var(--muted); }
input, select, button { font: inherit; padding: .25rem .45rem; }
button { cursor: pointer; }
a.button { display: inline-block; padding: .3rem .9rem; border: 1px solid var(--accent); border-radius: .3rem; text-decoration: none; font-weight: 600; }
button.danger { color: var(--danger); border-color: var(--danger); }
.refresh:not([hidden]) { display: flex; align-items: center; gap: .4rem; margin-left: auto; }
.refresh label { flex-direction: row; align-items: center; gap: .4rem; }
.tiles { display: flex; gap: 1rem; flex-wrap: wrap; }
.tiles div { border: 1px solid var(--line); padding: .5rem 1rem; min-width: 8rem; }
.tiles dt { color: var(--muted); font-size: .8rem; }
.tiles dd { margin: 0; font-size: 1.6rem; }
figure { margin: 1rem 0; }
svg { max-width: 100%; height: auto; }
svg.chart { border: 1px solid var(--line); }
svg text { fill: var(--muted); font-size: 11px; font-family: system-ui, sans-serif; }
svg .axis line { stroke: var(--muted); stroke-width: 1; }
svg .axis line.grid { stroke: var(--line); }
svg .axis-title { font-size: 11px; }
polyline, .swatch line { fill: none; stroke-width: 2; }
.undelivered { stroke: var(--accent); }
.dead { stroke: var(--danger); }
.delivered { stroke: var(--ok); }
.dashed { stroke-dasharray: 7 4; stroke-width: 2.5; }
.spark { display: block; border: 1px solid var(--line); }
.spark polyline { stroke-width: 1.5; }
.spark polyline.dashed { stroke-dasharray: 4 2; }
.swatch { vertical-align: middle; border: 0; }
.legend .key { margin-right: .8rem; white-space: nowrap; }
.key.undelivered { color: var(--accent); }
.key.dead { color: var(--danger); }
.key.delivered { color: var(--ok); }
input, select { max-width: 100%; }
/* A narrow screen: a table scrolls sideways inside the page rather than widening it. */
@media (max-width: 800px) {
  main { padding: .8rem .6rem 2rem; }
  header { padding: .5rem .6rem; gap: .6rem 1rem; }
  table { display: block; overflow-x: auto; max-width: 100%; }
  table.fields th { width: auto; }
  /* Columns keep their width and the table scrolls, rather than wrapping ids a letter a line. */
  table:not(.fields) th, table:not(.fields) td { white-space: nowrap; }
  table:not(.fields) td.error { white-space: normal; min-width: 16rem; }
  .tiles div { min-width: 6rem; padding: .4rem .6rem; }
  .refresh:not([hidden]) { margin-left: 0; }
}
`;

/**
 * "Select all" on a page of dead letters, and the page's reload interval (the Refresh control,
 * the body's data-refresh); the console works without either.
 */
export const CONSOLE_JS = `
document.addEventListener('DOMContentLoaded', function () {
  var all = document.getElementById('select-all');
  if (all) {
    all.addEventListener('change', function () {
      document.querySelectorAll('input[name="id"][form="selection"]').forEach(function (box) { box.checked = all.checked; });
    });
  }
  var form = document.getElementById('refresh-form');
  var select = document.getElementById('refresh');
  var state = document.getElementById('refresh-state');
  if (form && select) {
    form.hidden = false;
    select.addEventListener('change', function () { form.submit(); });
  }
  var seconds = Number(document.body.getAttribute('data-refresh')) || 0;
  if (seconds <= 0) return;
  var timer = setTimeout(function () { location.reload(); }, seconds * 1000);
  // A reload would throw away what the visitor is typing or ticking: stop reloading this page.
  document.addEventListener('input', function (event) {
    if (event.target === select || timer === null) return;
    clearTimeout(timer);
    timer = null;
    if (state) state.textContent = 'paused while you edit';
  }, true);
});
`;
