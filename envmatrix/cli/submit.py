"""`envmatrix submit`: the matrix fanned out on Slurm arrays, GitHub Actions runners or Kubernetes Indexed Jobs."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..errors import InputError
from ..submit import SubmitError, fanout, too_long, too_short, write_files
from ..submit import github as gh_submit
from ..submit import k8s as k8s_submit
from ..submit import slurm as slurm_submit
from . import options
from .common import profile_name, select_cells, warn


def add_parser(sub: options.Subparsers) -> None:
    p = sub.add_parser("submit", help="fan the matrix out on Slurm arrays, GitHub Actions runners or Kubernetes Indexed Jobs")
    p.add_argument("engine", choices=("slurm", "github", "k8s"), help="the scheduler to write jobs for")
    options.FILE.add(p)
    options.PROFILE.add(p)
    options.add_selection(p)
    options.GPU.add(p, note="every GPU type of the profile")
    shard = p.add_argument_group("each shard's envmatrix run", "passed to the envmatrix run of every shard; --reports is the folder they all share")
    options.BACKEND.add(shard)
    options.JOBS.add(shard)
    options.TIMEOUT.add(shard)
    options.REPORTS.add(shard)
    p.add_argument("--out", default=None, help="where the generated files go (default REPORTS/submit/ENGINE)")
    p.add_argument("--dry-run", action="store_true", help="print the generated files; write and submit nothing")
    p.add_argument("--submit", action="store_true", help="slurm: submit the arrays and the report job with sbatch")
    p.add_argument("--wait", action="store_true", help="slurm: wait for the report job, print where the merged report is")
    p.add_argument(
        "--docker-gid",
        type=int,
        metavar="GID",
        help="k8s with --backend docker: the group id of /var/run/docker.sock on the GPU nodes (stat -c %%g), given to the pods "
        "(the socket is root on the node: see docs/gpu-runners.md)",
    )
    p.add_argument("--build", action="store_true", help="k8s: build the runner images the Jobs name (Docker; then push them where the cluster pulls)")
    p.add_argument(
        "--schedule",
        metavar="CRON",
        help="github, slurm: instead of the matrix, run envmatrix watch on this schedule ('0 6 * * 1') on the GPU type's runners, "
        "opening or updating an issue when a new release breaks the profile (default profile: stack)",
    )
    p.add_argument(
        "--propose",
        metavar="FILE",
        help="with --schedule: your requirements.txt, pylock.toml or uv.lock; watch writes it moved to the newest releases that train, "
        "and the GitHub workflow opens or updates a pull request with it (an issue only where nothing can be proposed)",
    )
    p.set_defaults(func=handle)


def _pairs(flag: str, values: list[str]) -> list[str]:
    return [x for v in values for x in (flag, v)]


def handle(args: argparse.Namespace) -> int:
    """Write (and for Slurm submit and wait for) one job per GPU type with a task per shard, then a report job."""
    if args.propose and args.schedule is None:
        raise InputError("--propose goes with --schedule: the scheduled watch proposes the change")
    if args.engine != "slurm" and (args.submit or args.wait):
        raise InputError(f"--submit and --wait are for slurm; for {args.engine}, commit or apply the files written (see docs/gpu-runners.md)")
    if args.engine == "k8s" and args.backend not in ("auto", "host", "docker"):
        raise InputError(
            f"--backend {args.backend}: Kubernetes pods run their environment's cells with the host backend in its runner image, "
            "or with docker on the node's engine (--backend docker)"
        )
    if args.docker_gid is not None and (args.engine != "k8s" or args.backend != "docker"):
        raise InputError("--docker-gid is for submit k8s --backend docker: the group of the nodes' docker.sock")
    if args.build and (args.engine != "k8s" or args.dry_run):
        raise InputError("--build builds the runner images of submit k8s; it writes, so not with --dry-run")
    if args.wait and not args.submit:
        raise InputError("--wait needs --submit")
    if args.schedule is not None:
        return _schedule(args)
    spec, profile, cells = select_cells(args, gpu=args.gpu)
    slurm = args.engine == "slurm"
    # Slurm tasks run on a shared file system from this folder: absolute paths. Elsewhere: the checkout's or the volume's.
    file_, reports = (str(Path(args.file).resolve()), str(Path(args.reports).resolve())) if slurm else (args.file, args.reports)
    if args.engine == "k8s" and args.backend == "docker":
        k8s_submit.docker_socket(reports, args.docker_gid)  # a node folder the engine sees by the same name
    elif args.engine == "k8s" and not Path(reports).is_absolute():
        reports = f"{k8s_submit.MOUNT}/{reports}"  # on the shared volume; the matrix file comes with the image
    run_args = ["--file", file_, "--profile", profile, *_pairs("--only", args.only), *_pairs("--skip", args.skip)]
    run_args += ["--backend", args.backend, *(["--jobs", str(args.jobs)] if args.jobs else []), "--timeout", f"{args.timeout:g}", "--reports", reports]
    f = fanout(spec, profile, cells, run_args=run_args, reports=reports, cell_timeout=args.timeout)
    if slurm:
        files = slurm_submit.scripts(f, cwd=os.getcwd())
    elif args.engine == "github":
        files = {f"envmatrix-{profile}.yml": gh_submit.render(f)}
    else:
        digest = k8s_submit.source_digest(args.file)
        files = k8s_submit.manifests(f, digest, args.docker_gid)
        print(f"{len(k8s_submit.images(f, digest))} runner images ({k8s_submit.repository(f)}:*), one per environment", file=sys.stderr)
    for job in f.jobs:
        sizes = ", ".join(str(len(s)) for s in job.shards)
        n = job.needs
        print(
            f"{job.gpu}: {job.target.shards} shards of {sizes} cells (throttle {f.throttle(job)}); "
            f"each asks {n.gpus} GPUs, {n.cpus} cores, {n.mem_gb} GB, {n.minutes} min",
            file=sys.stderr,
        )
    for line in [*too_long(f), *too_short(f)]:
        warn(line)
    if args.dry_run:
        for name, text in files.items():
            print(f"# ---- {name}\n{text}")
        return 0
    folder = Path(args.out or Path(args.reports) / "submit" / args.engine)
    for path in write_files(folder, files):
        print(f"wrote {path}")
    if args.build:
        from ..submit import runner_image

        built = runner_image.build(k8s_submit.images(f, digest), profile=profile, matrix_file=args.file, logs=folder / "logs")
        print("push them where the cluster pulls from:\n" + "\n".join(f"  docker push {ref}" for ref in built))
    if not args.submit:
        return 0
    sub = slurm_submit.submit(folder.resolve(), f)
    print(f"submitted: arrays {', '.join(f'{g} {j}' for g, j in sub.arrays.items())}; report job {sub.report} (afterany)")
    if not args.wait:
        return 0
    states = slurm_submit.wait(sub)
    html = Path(reports) / "matrix.html"
    print(f"report: {html}" if html.is_file() else f"no report at {html}: see {reports}/slurm-logs/report-{sub.report}.log")
    bad = sorted(k for k, v in states.items() if v != "COMPLETED")
    if bad:
        raise SubmitError(
            f"not completed: {', '.join(f'{k} ({states[k]})' for k in bad)}; the report shows what finished; submit again to run only the missing cells"
        )
    return 0


def _schedule(args: argparse.Namespace) -> int:
    """Write the scheduled watch: a workflow for GitHub's self-hosted runners, or a job script and a scrontab entry."""
    from ..spec.matrix import load
    from ..submit import watch_job

    if args.engine == "k8s" or args.submit or args.only or args.skip:
        raise InputError("--schedule writes a scheduled envmatrix watch for github or slurm; --submit, --only and --skip do not apply to it")
    spec = load(args.file)
    profile = "stack" if args.profile == "auto" and "stack" in spec.profiles else profile_name(args, spec)
    slurm = args.engine == "slurm"
    file_, reports = (str(Path(args.file).resolve()), str(Path(args.reports).resolve())) if slurm else (args.file, args.reports)
    watch_args = ["--file", file_, "--backend", "venv" if args.backend == "auto" else args.backend, "--timeout", f"{args.timeout:g}", "--reports", reports]
    if args.propose:
        watch_args += ["--propose", str(Path(args.propose).resolve()) if slurm else args.propose]
    job = watch_job(spec, profile, args.gpu, args.schedule, watch_args=watch_args, reports=reports)
    folder = Path(args.out or Path(args.reports) / "submit" / args.engine)
    if slurm:
        files = slurm_submit.watch_files(job, folder=str(folder.resolve()), cwd=os.getcwd())
    else:
        files = {f"envmatrix-watch-{profile}.yml": gh_submit.render_watch(job)}
    if args.dry_run:
        for name, text in files.items():
            print(f"# ---- {name}\n{text}")
        return 0
    for path in write_files(folder, files):
        print(f"wrote {path}")
    if slurm:
        Path(reports, "slurm-logs").mkdir(parents=True, exist_ok=True)
        print(f"install: scrontab -l > mine; cat {folder}/watch.scrontab >> mine; scrontab mine")
    else:
        print(f"commit it under .github/workflows/; it runs on runners labelled {', '.join(job.target.labels)}")
    return 0
