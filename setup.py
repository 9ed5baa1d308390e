from configparser import ConfigParser
import setuptools, shlex

# All package metadata lives in settings.ini
config = ConfigParser(delimiters=['='])
config.read('settings.ini', encoding='utf-8')
cfg = config['DEFAULT']

cfg_keys = 'version description keywords author author_email'.split()
expected = cfg_keys + "lib_name user branch license status min_python audience language".split()
for o in expected: assert o in cfg, "missing expected setting: {}".format(o)
setup_cfg = {o: cfg[o] for o in cfg_keys}

licenses = {
    'apache2': ('Apache Software License 2.0', 'OSI Approved :: Apache Software License'),
    'mit': ('MIT License', 'OSI Approved :: MIT License'),
}
statuses = ['1 - Planning', '2 - Pre-Alpha', '3 - Alpha', '4 - Beta', '5 - Production/Stable', '6 - Mature', '7 - Inactive']
# Supported Python versions: every 3.x from min_python up to the newest one tested
py_versions = [f'3.{i}' for i in range(6, 14)]

lic = licenses.get(cfg['license'].lower(), (cfg['license'], None))
min_python = cfg['min_python']
requirements = shlex.split(cfg.get('requirements', ''))
dev_requirements = shlex.split(cfg.get('dev_requirements', ''))
onnx_requirements = shlex.split(cfg.get('onnx_requirements', ''))
docs_requirements = shlex.split(cfg.get('docs_requirements', ''))
app_requirements = shlex.split(cfg.get('app_requirements', ''))
tensorboard_requirements = shlex.split(cfg.get('tensorboard_requirements', ''))
wandb_requirements = shlex.split(cfg.get('wandb_requirements', ''))
png_requirements = shlex.split(cfg.get('png_requirements', ''))
sweep_requirements = shlex.split(cfg.get('sweep_requirements', ''))
console_scripts = cfg.get('console_scripts', '').split()

setuptools.setup(
    name=cfg['lib_name'],
    license=lic[0],
    classifiers=[
        'Development Status :: ' + statuses[int(cfg['status'])],
        'Intended Audience :: ' + cfg['audience'].title(),
        'Natural Language :: ' + cfg['language'].title(),
    ] + ['Programming Language :: Python :: ' + o
         for o in py_versions[py_versions.index(min_python):]]
      + (['License :: ' + lic[1]] if lic[1] else []),
    url=cfg['git_url'],
    packages=setuptools.find_packages(exclude=['tests', 'tests.*', 'benchmarks']),
    include_package_data=True,
    package_data={'gan_callbacks': ['cli/cli_facts.json']},   # the command line's defaults, read without importing torch
    install_requires=requirements,
    extras_require={'dev': dev_requirements, 'onnx': onnx_requirements, 'docs': docs_requirements, 'app': app_requirements,
                    'tensorboard': tensorboard_requirements, 'wandb': wandb_requirements,
                    'png': png_requirements, 'sweep': sweep_requirements},
    dependency_links=cfg.get('dep_links', '').split(),
    python_requires='>=' + min_python,
    long_description=open('README.md', encoding='utf-8').read(),
    long_description_content_type='text/markdown',
    zip_safe=False,
    entry_points={
        'console_scripts': console_scripts,
        'nbdev': [f'{cfg.get("lib_path")}={cfg.get("lib_path")}._modidx:d'],
    },
    **setup_cfg)
