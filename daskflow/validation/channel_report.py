"""The turbulent channel's table (see :mod:`daskflow.validation.channel`): the numbers of the
validation as markdown, computed from the reduced data by
:func:`daskflow.validation.channel_comparison.evaluate`, and the recorded reproductions of the run."""

from __future__ import annotations

import json
from pathlib import Path

from daskflow.validation.channel_comparison import COMPARED, PRESSURE_COLUMN, evaluate

NAMES = {"U_plus": "U+", "u_rms_plus": "u'+ (streamwise)", "w_rms_plus": "w'+ (wall-normal)",
         "v_rms_plus": "v'+ (spanwise)", "reynolds_stress_plus": "-<u'w'>+", "p_rms_plus": "p'+"}


def table(data_dir: Path) -> str:
    """The numbers of the channel validation as markdown: the windows, the statistical errors of the
    scalar series, the comparison with Moser, Kim & Mansour and with Lee & Moser, the resolution, the
    spectra, and the recorded reproductions."""
    ev = evaluate(data_dir)
    sections = [_window_table(ev), [_averaging_window(ev)], _scalar_error_table(ev), _reference_table(ev),
                _profile_table(ev), *([note] for note in _notes(ev))]
    reproductions = reproduction_table(data_dir)
    if reproductions:
        sections += [["Reproductions of the run's first steps:"], [reproductions]]
    return "\n\n".join("\n".join(section) for section in sections)


def _window_table(ev: dict) -> list[str]:
    """The bulk numbers and the stress balance of the whole window and of its halves."""
    summary = ev["summary"]
    rows = ["| window (t U_b/h) | samples | Re_tau | Cf | Cf Dean | U_c/U_b | U_c+ | peak u'+ (y+) "
            "| max balance error, y+ > 30 | max balance error, all y |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for name, w in summary["windows"].items():
        rows.append(f"| {name}: {w['window'][0]:.2f}-{w['window'][1]:.2f} | {w['samples']} | {w['re_tau']:.2f} | "
                    f"{w['cf']:.5f} | {w['cf_dean']:.5f} ({100 * (w['cf'] / w['cf_dean'] - 1):+.1f}%) | "
                    f"{w['u_c_over_u_b']:.4f} | {w['u_c_plus']:.2f} | {w['u_rms_peak_plus']:.3f} "
                    f"({w['u_rms_peak_yplus']:.1f}) | {100 * w['balance_error_away']:.2f}% | "
                    f"{100 * w['balance_error_all']:.2f}% |")
    return rows


def _averaging_window(ev: dict) -> str:
    """The averaging window, in h/U_b and in h/u_tau, and its number of profile samples."""
    full = ev["summary"]["windows"]["full"]
    t0, t1 = full["window"]
    return (f"Averaging window: t U_b/h = {t0:.2f} to {t1:.5f} (the last record), {t1 - t0:.2f} h/U_b = "
            f"{ev['window_h_over_u_tau']:.2f} h/u_tau (u_tau/U_b = 1/{full['u_b_plus']:.3f} of the window); "
            f"{full['samples']} profile samples.")


def _halves(ev: dict) -> tuple[dict | None, dict | None]:
    """The numbers of the window's first and second halves (None for a half the summary lacks)."""
    return ev["summary"]["windows"].get("first_half"), ev["summary"]["windows"].get("second_half")


def _scalar_error_table(ev: dict) -> list[str]:
    """The statistical errors of Re_tau and Cf: batch means, the autocorrelation time and the halves."""
    stats, halves = ev["statistics"], _halves(ev)
    rows = ["| scalar series | samples (t U_b/h) | mean | tau_int (samples; h/U_b) | batch (samples; h/U_b) "
            "| batches | sigma, batch means | sigma from tau_int | sigma from the halves |",
            "|---|---|---|---|---|---|---|---|---|"]
    for name, key, fmt in (("Re_tau", "re_tau", ".2f"), ("Cf", "cf", ".3e")):
        st = stats[name.lower()]
        half = f"{0.5 * abs(halves[0][key] - halves[1][key]):{fmt}}" if all(halves) else "-"
        rows.append(f"| {name} | {st['samples']} ({st['first']:.2f}-{st['last']:.2f}) | {st['mean']:{fmt}} | "
                    f"{st['tau_int']:.1f}; {st['tau_int'] * st['sample_dt']:.1f} | {st['batch']}; "
                    f"{st['batch'] * st['sample_dt']:.1f} | {st['batches']} | {st['stderr']:{fmt}} | "
                    f"{st['stderr_tau']:{fmt}} | {half} |")
    return rows


def _reference_table(ev: dict) -> list[str]:
    """daskflow's bulk numbers (with their 1-sigma errors) against those of each reference (Moser, Kim &
    Mansour; Lee & Moser), each also carried to daskflow's Re_b by Dean's correlation."""
    stats, halves, full = ev["statistics"], _halves(ev), ev["summary"]["windows"]["full"]
    re_tau, cf = stats["re_tau"], stats["cf"]
    sig = {key: 0.5 * abs(halves[0][key] - halves[1][key]) if all(halves) else float("nan")
           for key in ("u_c_plus", "u_c_over_u_b", "u_b_plus", "u_rms_peak_plus")}
    ours = [f"{full['re_b']:.0f} (imposed)",
            f"{_pm(re_tau['mean'], re_tau['stderr'], 2)} (profile mean: {full['re_tau']:.2f})",
            f"{cf['mean']:.3e} ± {cf['stderr']:.1e}", f"{100 * (cf['mean'] / full['cf_dean'] - 1):+.1f}%",
            _pm(full["u_b_plus"], sig["u_b_plus"], 3), _pm(full["u_c_plus"], sig["u_c_plus"], 3),
            _pm(full["u_c_over_u_b"], sig["u_c_over_u_b"], 4),
            f"{_pm(full['u_rms_peak_plus'], sig['u_rms_peak_plus'], 3)} ({full['u_rms_peak_yplus']:.1f})"]
    columns = [_reference_column(ev, reference) for reference in ev["references"].values()]
    quantities = ["Re_b = 2h U_b/nu", "Re_tau", "Cf", "Cf / Dean's 0.073 Re_b^(-1/4)", "U_b+", "U_c+", "U_c/U_b",
                  "peak u'+ (y+)"]
    head = "".join(f" {name} | difference |" for name in ev["references"])
    rows = [f"| quantity | daskflow (± 1 sigma) |{head}", "|---|---|" + "---|---|" * len(columns)]
    for i, quantity in enumerate(quantities):
        cells = "".join(f" {column[i][0]} | {column[i][1]} |" for column in columns)
        rows.append(f"| {quantity} | {ours[i]} |{cells}")
    return rows


def _reference_column(ev: dict, reference: dict) -> list[tuple[str, str]]:
    """One reference's cells of :func:`_reference_table`, each (value, daskflow's difference from it)."""
    bulk, (peak, peak_y) = reference["bulk"], reference["peak"]
    full, re_tau, cf = ev["summary"]["windows"]["full"], ev["statistics"]["re_tau"], ev["statistics"]["cf"]
    re_b = full["re_b"]
    ratio = re_b / bulk["Re_b"]  # Dean's Cf ~ Re_b^(-1/4), i.e. Re_tau ~ Re_b^(7/8), carries it to our Re_b
    scaled = {"re_tau": bulk["re_tau"] * ratio**0.875, "cf": bulk["Cf"] * ratio**-0.25}
    centre = "" if reference["reference"]["y_over_h"][-1] == 1.0 else " (spline at y/h = 1)"
    return [(f"{bulk['Re_b']:.0f} (from its U+)", f"{100 * (re_b / bulk['Re_b'] - 1):+.2f}%"),
            (f"{bulk['re_tau']:.2f} ({scaled['re_tau']:.2f} at Re_b {re_b:.0f}, scaled as Re_b^(7/8))",
             f"{re_tau['mean'] - bulk['re_tau']:+.2f} ({re_tau['mean'] - scaled['re_tau']:+.2f} scaled)"),
            (f"{bulk['Cf']:.3e} ({scaled['cf']:.3e} at Re_b {re_b:.0f}, scaled as Re_b^(-1/4))",
             f"{100 * (cf['mean'] / bulk['Cf'] - 1):+.2f}% ({100 * (cf['mean'] / scaled['cf'] - 1):+.2f}% scaled)"),
            (f"{100 * (bulk['Cf'] / (0.073 * bulk['Re_b'] ** -0.25) - 1):+.1f}%", ""),
            (f"{bulk['U_b_plus']:.3f}", f"{100 * (full['u_b_plus'] / bulk['U_b_plus'] - 1):+.2f}%"),
            (f"{bulk['U_c_plus']:.3f}{centre}", f"{100 * (full['u_c_plus'] / bulk['U_c_plus'] - 1):+.2f}%"),
            (f"{bulk['U_c_over_U_b']:.4f}", f"{100 * (full['u_c_over_u_b'] / bulk['U_c_over_U_b'] - 1):+.2f}%"),
            (f"{peak:.3f} ({peak_y:.1f}, spline)", f"{100 * (full['u_rms_peak_plus'] / peak - 1):+.2f}%")]


def _profile_table(ev: dict) -> list[str]:
    """The largest difference of each compared profile from each reference, and its statistical error."""
    rows = ["| profile | reference | max \\|daskflow - reference\\| | at y+ | % of the reference's peak | sigma there "
            "| difference / sigma |", "|---|---|---|---|---|---|---|"]
    for name in COMPARED:
        for reference in ev["references"].values():
            c = reference["compared"].get(name)
            if c is None:
                continue
            rows.append(f"| {NAMES[name]} | {reference['short']} | {c['max_abs']:.3f} ({c['difference']:+.3f}) | "
                        f"{c['at_yplus']:.1f} | {100 * c['max_abs'] / c['reference_peak']:.1f}% | "
                        f"{c.get('sigma', float('nan')):.4f} | {c.get('over_sigma', float('nan')):.1f} |")
    return rows


def _notes(ev: dict) -> list[str]:
    """The sentences after the tables: a missing pressure rms, the resolution, the slice's spectra."""
    full, notes = ev["summary"]["windows"]["full"], []
    if PRESSURE_COLUMN not in ev["profiles"]["full"]:
        notes.append("The committed profiles have no pressure rms (p'+): the reduction of this run did not write it.")
    if "resolution" in ev:
        r = ev["resolution"]
        notes.append(f"Resolution at Re_tau = {full['re_tau']:.2f}: dx+ = {r['dx_plus']:.2f}, "
                     f"dy+ = {r['dy_plus']:.2f}, dz+ = {r['dz_plus_min']:.2f} (wall) to {r['dz_plus_max']:.2f} "
                     f"(centre), first cell centre z+ = {r['z1_plus']:.2f}; box {r['lx_plus']:.0f} x "
                     f"{r['ly_plus']:.0f} x {2 * full['re_tau']:.0f} wall units.")
    if "slice" in ev:
        sl, peaks = ev["slice"], ev["slice"]["peak_wavelength_plus"]
        notes.append(f"Slice: one snapshot at t = {sl['time']:.2f} h/U_b, plane z = {sl['z']:.5f} h "
                     f"(y+ = {sl['yplus']:.2f}), u'+^2 = {sl['variance_plus']:.3f}; premultiplied spectra peak "
                     f"at lambda_x+ = {peaks['x']:.0f} and lambda_y+ = {peaks['y']:.0f}; the k = 0 bins hold "
                     f"{100 * sl['zero_mode_fraction']['x']:.1f}% (x) and "
                     f"{100 * sl['zero_mode_fraction']['y']:.1f}% (y) of the variance.")
    return notes


def _pm(value: float, sigma: float, digits: int) -> str:
    """``value ± sigma`` with ``digits`` decimals."""
    return f"{value:.{digits}f} ± {sigma:.{digits}f}"


def reproduction_table(data_dir: Path) -> str:
    """Markdown table of the recorded reproductions (empty when there are none)."""
    path = Path(data_dir) / "channel180-reproduction.json"
    if not path.exists():
        return ""
    rows = ["| device | commit | cluster, pencils | steps | wall time (s) | max rel. deviation: Re_tau | "
            "tau_w (bottom, top) | kinetic energy | dt | within 1e-7 |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in json.loads(path.read_text()):
        w = r["max_relative_deviation"]
        commit = r["commit"] or (f"v{r['version']} (installed)" if r.get("version") else "-")
        rows.append(f"| {r['device']} | {commit} | {r['cluster']}, {tuple(r['pencils'])} | {r['steps']} | "
                    f"{r['wall_s']} | {w['re_tau']:.1e} | {w['tau_wall_bottom']:.1e}, {w['tau_wall_top']:.1e} | "
                    f"{w['kinetic_energy']:.1e} | {w['dt']:.1e} | {'yes' if r['reproduces'] else 'no'} |")
    return "\n".join(rows)
