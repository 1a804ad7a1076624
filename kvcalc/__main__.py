"""`python -m kvcalc` runs the CLI."""

if __name__ == "__main__":
    import gc

    # start-up creates objects that live until exit (modules, classes, the command): the cyclic
    # collector waits until the command runs, as `main(collector_paused=True)` says
    # (`kvcalc.cli.output.resume_collector`)
    gc.disable()

    from kvcalc.cli import main

    main(collector_paused=True)
