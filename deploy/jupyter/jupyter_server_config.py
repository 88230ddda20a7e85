"""The project's Jupyter settings for `make lab` (the Makefile adds this folder to JUPYTER_CONFIG_PATH).

A reader's JupyterLab must make no request off the machine: by default it fetches the JupyterLab
news feed and checks PyPI for a newer version (and first asks in a popup whether it may), and its
extension manager searches PyPI. All three are off here. The reader's own ~/.jupyter settings
still apply on top of these.
"""
c = get_config()  # noqa: F821  (defined by Jupyter when it loads this file)

c.ServerApp.ip = "127.0.0.1"                  # this machine only
c.LabApp.news_url = None                      # no news feed (and no "receive news?" popup)
c.LabApp.check_for_updates_class = "jupyterlab.handlers.announcements.NeverCheckForUpdate"
c.LabApp.extension_manager = "readonly"       # lists installed extensions, never searches PyPI
