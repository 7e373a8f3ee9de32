package methods

import (
	"maps"
	"strings"
)

// referenceMethod is what the reference deployment's profile lays over one
// built-in label: the reference's method key and what its engine hands
// that method's program (read from the reference's `api/methods/*.py`
// descriptors and `api/prediction_engines/*.py`). Everything else (targets,
// columns, output forms, planner profile, steps, file contract) stays the
// built-in's.
type referenceMethod struct {
	Key         string
	DisplayName string
	// Publication as the reference's descriptor states it; empty where it
	// states none.
	Authors, Title, CitationURL, RepoURL string
	MoreInfo                             string
	// ModelVersion, when set, is the descriptor's model_version.
	ModelVersion string
	// Env replaces the built-in's EnvPaths: the names the program reads,
	// with kinflow's placeholders for the reference's DATA_PATHS and
	// PYTHON_PATHS entries.
	Env []EnvVar
	// RowKeys maps an input column to the row key the program reads
	// (the descriptor's col_to_kwarg).
	RowKeys map[string]string
	// Kwargs are added to every supported target's TargetKwargs.
	Kwargs map[string]string
	// Params are added to every supported target's Params (typed JSON
	// values of the json contract).
	Params map[string]any
}

// The reference's descriptors map the single substrate column to
// `substrates` and TurNup's two columns to `substrates` and `products`.
var (
	referenceSingle = map[string]string{"Substrate": "substrates"}
	referenceMulti  = map[string]string{"Substrates": "substrates", "Products": "products"}
)

// kinformEnv is KinForm's environment (its engine sets it from DATA_PATHS
// media, tools, KinForm and PYTHON_PATHS esm2, esmc, t5, pseq2sites).
var kinformEnv = builtinEnv("KINFORM_MEDIA_PATH", "{media}", "KINFORM_TOOLS_PATH", "{tools}",
	"KINFORM_DATA", "{data_dir}", "KINFORM_ESM_PATH", "{esm_python}", "KINFORM_ESMC_PATH", "{esmc_python}",
	"KINFORM_T5_PATH", "{t5_python}", "KINFORM_PSEQ2SITES_PATH", "{pseq2sites_python}")

// omniesiEnv is the environment of both OmniESI variants (one program, one
// embedding folder). Its program deletes the embedding files it read
// unless OMNIESI_DELETE_EMBEDDINGS_AFTER_RUN is 0 (older program) or
// params.cleanup_embeddings_after_run is false (newer): kinflow's Cleanup
// deletes ephemeral files once no running job needs them, so the program
// must not.
var omniesiEnv = builtinEnv("OMNIESI_EMBED_CACHE_DIR", "{folder:methodg_esm2}", "OmniESI_CACHE_DIR", "{model_dir}",
	"OmniESI_ADDITIONAL_DATA", "{data_dir}", "OMNIESI_DELETE_EMBEDDINGS_AFTER_RUN", "0")

// referenceTable is the reference profile, by built-in label; every
// built-in label has an entry (the reference's test holds it).
var referenceTable = map[string]referenceMethod{
	"A-H": {
		Key: "KinForm-H", DisplayName: "KinForm-H",
		Authors:     "Saleh Alwer, Ronan M T Fleming",
		Title:       "KinForm: Kinetics Informed Feature Optimised Representation Models for Enzyme kcat and KM Prediction",
		CitationURL: "https://www.nature.com/articles/s41540-026-00692-5",
		RepoURL:     "https://github.com/Digital-Metabolic-Twin-Centre/KinForm",
		MoreInfo:    "Recommended for proteins with high sequence similarity to training data.",
		Env:         kinformEnv, RowKeys: referenceSingle,
		// The engine runs `--model_config KinForm-<model_variant>`.
		Kwargs: map[string]string{"model_config": "KinForm-H"},
	},
	"A-L": {
		Key: "KinForm-L", DisplayName: "KinForm-L",
		Authors:     "Saleh Alwer, Ronan M T Fleming",
		Title:       "KinForm: Kinetics Informed Feature Optimised Representation Models for Enzyme kcat and KM Prediction",
		CitationURL: "https://www.nature.com/articles/s41540-026-00692-5",
		RepoURL:     "https://github.com/Digital-Metabolic-Twin-Centre/KinForm",
		MoreInfo:    "Recommended for proteins with low sequence similarity to training data.",
		Env:         kinformEnv, RowKeys: referenceSingle,
		Kwargs: map[string]string{"model_config": "KinForm-L"},
	},
	"B": {
		Key: "CataPro", DisplayName: "CataPro",
		Authors: "Zechen Wang, Dongqi Xie, Dong Wu, Xiaozhou Luo, Sheng Wang, Yangyang Li, Yanmei Yang, " +
			"Weifeng Li, Liangzhen Zheng",
		Title:       "Robust enzyme discovery and engineering with deep learning using CataPro",
		CitationURL: "https://www.nature.com/articles/s41467-025-58038-4",
		RepoURL:     "https://github.com/zchwang/CataPro",
		Env: builtinEnv("CATAPRO_MEDIA_PATH", "{media}", "CATAPRO_TOOLS_PATH", "{tools}",
			"CATAPRO_MODEL_ROOT", "{model_dir}"),
		RowKeys: referenceSingle,
	},
	"C": {
		Key: "UniKP", DisplayName: "UniKP",
		Authors:     "Han Yu, Huaxiang Deng, Jiahui He, Jay D. Keasling & Xiaozhou Luo",
		Title:       "UniKP: a unified framework for the prediction of enzyme kinetic parameters",
		CitationURL: "https://www.nature.com/articles/s41467-023-44113-1",
		RepoURL:     "https://github.com/Luo-SynBioLab/UniKP",
		Env:         builtinEnv("UNIKP_MEDIA_PATH", "{media}", "UNIKP_TOOLS_PATH", "{tools}"),
		RowKeys:     referenceSingle,
	},
	"D": {
		Key: "TurNup", DisplayName: "TurNup",
		Authors:     "Alexander Kroll, Yvan Rousset, Xiao-Pan Hu, Nina A. Liebrand & Martin J. Lercher",
		Title:       "Turnover number predictions for kinetically uncharacterised enzymes using machine and deep learning",
		CitationURL: "https://www.nature.com/articles/s41467-023-39840-4",
		RepoURL:     "https://github.com/AlexanderKroll/Kcat_prediction",
		MoreInfo:    "Recommended for natural reactions of wild-type enzymes.",
		Env:         builtinEnv("TURNUP_MEDIA_PATH", "{media}", "TURNUP_TOOLS_PATH", "{tools}"),
		RowKeys:     referenceMulti,
	},
	"E": {
		Key: "CatPred", DisplayName: "CatPred",
		Authors:     "Veda Sheersh Boorla, Somtirtha Santra, Costas D. Maranas",
		Title:       "CatPred: A comprehensive framework for deep learning in vitro enzyme kinetic parameters",
		CitationURL: "https://www.nature.com/articles/s41467-025-57215-9",
		RepoURL:     "https://github.com/maranasgroup/CatPred",
		MoreInfo:    "Recommended for wildtype proteins.",
		// CatPred refuses checkpoints outside
		// CATPRED_TRUSTED_DESERIALIZATION_ROOTS; the reference sets it to
		// its checkpoint folder.
		Env: builtinEnv("CATPRED_REPO_ROOT", "{model_dir}", "CATPRED_CHECKPOINT_ROOT", "{methode_checkpoint_root}",
			"CATPRED_TRUSTED_DESERIALIZATION_ROOTS", "{methode_checkpoint_root}",
			"CATPRED_MEDIA_PATH", "{media}", "CATPRED_TOOLS_PATH", "{tools}", "PROTEIN_EMBED_USE_CPU", "1"),
		RowKeys: referenceSingle,
	},
	"F": {
		Key: "EITLEM", DisplayName: "EITLEM-Kinetics",
		Authors:     "Xiaowei Shen, Ziheng Cui, Jianyu Long, Shiding Zhang, Biqiang Chen, Tianwei Tan",
		Title:       "EITLEM-Kinetics: A deep-learning framework for kinetic parameter prediction of mutant enzymes",
		CitationURL: "https://www.sciencedirect.com/science/article/pii/S2667109324002665",
		RepoURL:     "https://github.com/XvesS/EITLEM-Kinetics",
		// EITLEM deletes the esm1v files it read unless told 0; kinflow's
		// Cleanup deletes them once no running job needs them.
		Env: builtinEnv("EITLEM_MEDIA_PATH", "{media}", "EITLEM_TOOLS_PATH", "{tools}",
			"EITLEM_DELETE_EMBEDDINGS_AFTER_RUN", "0"),
		RowKeys: referenceSingle,
	},
	"G": {
		Key: "OmniESI", DisplayName: "OmniESI",
		Authors: "Zhiwei Nie, Hongyu Zhang, Hao Jiang, Yutian Liu, Xiansong Huang, Fan Xu, Jie Fu, Zhixiang Ren, " +
			"Yonghong Tian, Wen-Bin Zhang, Jie Chen",
		Title:       "OmniESI: A unified framework for enzyme-substrate interaction prediction with progressive conditional deep learning",
		CitationURL: "https://doi.org/10.48550/arXiv.2506.17963",
		RepoURL:     "https://github.com/Hong-yu-Zhang/OmniESI",
		Env:         omniesiEnv, RowKeys: referenceSingle,
		Params: map[string]any{"cleanup_embeddings_after_run": false},
	},
	"G-O2": {
		Key: "OmniESI-O2DENet", DisplayName: "OmniESI + O2DENet",
		Authors: "Haomin Wu, Zhiwei Nie, Hongyu Zhang, Zhixiang Ren",
		Title: "Pseudodata-Guided Invariant Representation Learning Boosts the Out-of-Distribution " +
			"Generalization in Enzymatic Kinetic Parameter Prediction",
		CitationURL: "https://pubs.acs.org/doi/10.1021/acs.jcim.5c03204?ref=PDF",
		RepoURL:     "https://github.com/blackjack534/O2DENet",
		Env:         omniesiEnv, RowKeys: referenceSingle,
		Params: map[string]any{"cleanup_embeddings_after_run": false},
	},
	"H": {
		Key: "RealKcat", DisplayName: "RealKcat",
		Authors:     "Sajeevan AK, Osinuga A, Mali A, et al.",
		Title:       "Robust Prediction of Enzyme Variant Kinetics with RealKcat",
		CitationURL: "https://doi.org/10.1101/2025.02.10.637555",
		RepoURL:     "https://github.com/TKAI-LAB-Mali/RealKcat",
		Env: builtinEnv("REALKCAT_DATA", "{model_dir}",
			"REALKCAT_EMBED_CACHE_DIR", "{folder:esm2_layer_last_mean}"),
		RowKeys: referenceSingle,
	},
	"I": {
		Key: "IECata", DisplayName: "IECata",
		Authors: "Jingjing Wang, Yanpeng Zhao, Zhijiang Yang, Ge Yao, Penggang Han, Jiajia Liu, Chang Chen, " +
			"Peng Zan, Xiukun Wan, Xiaochen Bo, Hui Jiang",
		Title: "IECata: Interpretable bilinear attention network and evidential deep learning improve the " +
			"catalytic efficiency prediction of enzymes",
		CitationURL: "https://doi.org/10.1093/bib/bbaf283",
		RepoURL:     "https://github.com/zhaoyanpeng208/IECata",
		Env:         builtinEnv("IECATA_DATA", "{data_dir}", "IECATA_EMBED_DIR", "{folder:methodi_prot_t5_residues}"),
		RowKeys:     referenceSingle,
	},
	"J": {
		Key: "MMISA-KM", DisplayName: "MMISA-KM",
		Authors:     "Aijie Song, Kai Wang",
		Title:       "MMISA-KM: A multimodal deep learning model for Michaelis constant prediction",
		CitationURL: "https://doi.org/10.1109/DDCLS66240.2025.11064981",
		RepoURL:     "https://github.com/kaiwang-group/MMISA-KM",
		// Its descriptor passes no environment (weights beside the script).
		Env:     []EnvVar{},
		RowKeys: referenceSingle,
	},
	"K": {
		Key: "CatRange", DisplayName: "CatRange", ModelVersion: "2",
		Authors: "Karuna Anna Sajeevan, Abraham Osinuga, Arunraj B, Sakib Ferdous, Nabia Shahreen, Shashank Koneru, " +
			"Laura Mariana Santos-Correa, Rahil Salehi, Niaz Bahar Chowdhury, Randy Aryee, Brisa Calderon-Lopez, " +
			"Supantha Dey, Ankur Mali, Rajib Saha, and Ratul Chowdhury",
		Title:       "CatRange Enables Robust Prediction of Enzyme Variant Kinetic Regimes",
		CitationURL: "https://doi.org/10.1101/2025.02.10.637555",
		RepoURL:     "https://github.com/ssbio/CatRange",
		// CATRANGE_ESMC_PYTHON is the shared esmc interpreter, which the
		// reference's engine adds from PYTHON_PATHS.
		Env: builtinEnv("CATRANGE_REPO_ROOT", "{model_dir}", "CATRANGE_MODELS_DIR", "{model_dir}",
			"CATRANGE_MEDIA_DIR", "{media}", "CATRANGE_ESMC_PYTHON", "{esmc_python}"),
		RowKeys: referenceSingle,
	},
	"L": {
		Key: "DLKcat", DisplayName: "DLKcat",
		Authors: "Feiran Li, Le Yuan, Hongzhong Lu, Gang Li, Yu Chen, Martin K. M. Engqvist, " +
			"Eduard J. Kerkhoven & Jens Nielsen",
		Title:       "Deep learning-based kcat prediction enables improved enzyme-constrained model reconstruction",
		CitationURL: "https://www.nature.com/articles/s41929-022-00798-z",
		RepoURL:     "https://github.com/SysBioChalmers/DLKcat",
		// DLKcat's Data folder (DATA_PATHS "DLKcat") and its Results folder
		// of trained weights (DATA_PATHS "DLKcat_Results").
		Env:     builtinEnv("DLKCAT_DATA_PATH", "{data_dir}", "DLKCAT_RESULTS_PATH", "{model_dir}"),
		RowKeys: referenceSingle,
	},
}

// referenceKeys maps each built-in label to its reference key.
func referenceKeys() map[string]string {
	out := make(map[string]string, len(referenceTable))
	for label, m := range referenceTable {
		out[label] = m.Key
	}
	return out
}

// reference is the reference profile built from the built-in table list:
// each descriptor with a referenceTable entry gets the reference's key,
// name, publication, environment, row keys and parameters; a label without
// an entry is left as it is.
func reference(list []*Descriptor) []*Descriptor {
	out := make([]*Descriptor, 0, len(list))
	for _, d := range list {
		m, ok := referenceTable[d.Key]
		if !ok {
			out = append(out, d)
			continue
		}
		d = d.Clone()
		d.Key, d.DisplayName = m.Key, m.DisplayName
		d.Authors, d.PublicationTitle, d.CitationURL, d.RepoURL = m.Authors, m.Title, m.CitationURL, m.RepoURL
		if m.MoreInfo != "" {
			d.MoreInfo = strings.TrimSpace(m.MoreInfo + " " + d.MoreInfo)
		}
		if m.ModelVersion != "" {
			d.ModelVersion = m.ModelVersion
		}
		if m.Env != nil {
			d.EnvPaths = append([]EnvVar{}, m.Env...)
		}
		for i, ck := range d.ColToKwarg {
			if k, ok := m.RowKeys[ck.Column]; ok {
				d.ColToKwarg[i].Kwarg = k
			}
		}
		for _, t := range d.Supports {
			if len(m.Kwargs) > 0 {
				if d.TargetKwargs == nil {
					d.TargetKwargs = map[Target]map[string]string{}
				}
				if d.TargetKwargs[t] == nil {
					d.TargetKwargs[t] = map[string]string{}
				}
				maps.Copy(d.TargetKwargs[t], m.Kwargs)
			}
			if len(m.Params) > 0 {
				if d.Params == nil {
					d.Params = map[Target]map[string]any{}
				}
				if d.Params[t] == nil {
					d.Params[t] = map[string]any{}
				}
				maps.Copy(d.Params[t], m.Params)
			}
		}
		out = append(out, d)
	}
	return out
}
