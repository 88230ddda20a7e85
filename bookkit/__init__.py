"""bookkit: the machinery that turns the chapters into a book and a course.

Nothing here is needed to learn from the chapters (they import ``transformer_lib`` only), and
``transformer_lib`` never imports ``bookkit``. The Makefile calls these modules:

    conventions  the chapter rules, written once: NN-slug file names, cell tags, the check call
                 and its PASS / NOT YET verdict, how a notebook is executed
    notebooks    .md -> executed .ipynb (`make chapters`), .md/.ipynb sync check (`make book`)
    copies       student copies without solutions, instructor copies (`make student`, `make instructor`)
    slides       one offline reveal.js deck per chapter (`make slides`)
    progress     run every checker in a learner's notebooks and tabulate the verdicts (`make progress`)
    build_book   the static HTML book (`make book`)
"""
