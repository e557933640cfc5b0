//! A convolution described by a plain JavaScript object, PyTorch's vocabulary in camelCase.

use wasm_bindgen::prelude::*;
use wgconv::{Activation, Conv2dOptions, Conv2dSpec, Kernel, Padding, Precision, Storage};

/// What a JavaScript spec object says:
///
/// ```js
/// { inChannels: 64, outChannels: 64,
///   kernel: 3,              // or [kh, kw]
///   stride: 1,              // or [sh, sw]
///   padding: 1,             // or [ph, pw] (both sides), or [top, left, bottom, right] (ONNX pads)
///   dilation: 1,            // or [dh, dw]
///   groups: 1, bias: false, relu: false,
///   kernelName: "tiled:m32n64k32-t4x4-w4-s2",   // optional: run this kernel, not selection's
///   precision: "f32",       // optional: "f32" (default), "f16" (needs shader-f16)
///   storage: "f32" }        // optional: "f32" (default), "f16": tensors as f16 (forwardF16)
/// ```
pub struct SpecArgs {
    /// The convolution.
    pub spec: Conv2dSpec,
    /// ReLU after the bias.
    pub relu: bool,
    /// The kernel to run instead of selection's.
    pub kernel: Option<String>,
    /// The precision (default f32).
    pub precision: Option<String>,
    /// The tensors' element type (default f32).
    pub storage: Storage,
}

impl SpecArgs {
    /// Reads a spec object; a missing or malformed field is an error naming it.
    pub fn from_js(v: &JsValue) -> Result<SpecArgs, JsError> {
        if !v.is_object() {
            return Err(JsError::new(
                "a convolution is described by an object: {inChannels, outChannels, kernel, ...}",
            ));
        }
        let in_c = required_u32(v, "inChannels")?;
        let out_c = required_u32(v, "outChannels")?;
        let [kh, kw] = pair(v, "kernel", None)?;
        let [sh, sw] = pair(v, "stride", Some(1))?;
        let [dh, dw] = pair(v, "dilation", Some(1))?;
        let padding = match numbers(v, "padding")?.as_deref() {
            None => Padding::uniform(0),
            Some([p]) => Padding::uniform(*p),
            Some([ph, pw]) => Padding::symmetric(*ph, *pw),
            Some([t, l, b, r]) => Padding::new(*t, *l, *b, *r),
            Some(other) => return Err(JsError::new(&format!("padding has 1, 2 or 4 numbers, not {other:?}"))),
        };
        let groups = optional_u32(v, "groups")?.unwrap_or(1);
        let spec = Conv2dSpec::new(in_c, out_c, kh)
            .kernel_hw((kh, kw))
            .stride((sh, sw))
            .dilation((dh, dw))
            .padding(padding)
            .groups(groups)
            .with_bias(flag(v, "bias")?);
        Ok(SpecArgs {
            spec,
            relu: flag(v, "relu")?,
            kernel: optional_string(v, "kernelName")?,
            precision: optional_string(v, "precision")?,
            storage: match optional_string(v, "storage")?.as_deref() {
                None | Some("f32") => Storage::F32,
                Some("f16") => Storage::F16,
                Some(other) => return Err(JsError::new(&format!("storage is \"f32\" or \"f16\", not {other:?}"))),
            },
        })
    }

    /// The options of a `Conv2d`: activation, storage, precision and an explicit kernel. Assigned
    /// field by field from the defaults, so that fields wgconv adds later keep theirs.
    #[allow(clippy::field_reassign_with_default)]
    pub fn options(&self) -> Result<Conv2dOptions, JsError> {
        let mut options = Conv2dOptions::default();
        options.activation = if self.relu { Activation::Relu } else { Activation::None };
        options.storage = self.storage;
        if let Some(p) = &self.precision {
            options.precision = p.parse::<Precision>().map_err(crate::js)?;
        }
        if let Some(k) = &self.kernel {
            options.kernel = Some(k.parse::<Kernel>().map_err(crate::js)?);
        }
        Ok(options)
    }
}

fn get(v: &JsValue, key: &str) -> Result<Option<JsValue>, JsError> {
    let x =
        js_sys::Reflect::get(v, &JsValue::from_str(key)).map_err(|_| JsError::new(&format!("cannot read {key}")))?;
    Ok((!x.is_undefined() && !x.is_null()).then_some(x))
}

/// A whole number in u32's range.
fn as_u32(x: &JsValue, key: &str) -> Result<u32, JsError> {
    match x.as_f64() {
        Some(f) if f.fract() == 0.0 && (0.0..=u32::MAX as f64).contains(&f) => Ok(f as u32),
        _ => Err(JsError::new(&format!("{key} must be a whole number ≥ 0, not {x:?}"))),
    }
}

fn required_u32(v: &JsValue, key: &str) -> Result<u32, JsError> {
    optional_u32(v, key)?.ok_or_else(|| JsError::new(&format!("the spec needs {key}")))
}

fn optional_u32(v: &JsValue, key: &str) -> Result<Option<u32>, JsError> {
    get(v, key)?.map(|x| as_u32(&x, key)).transpose()
}

/// A number or an array of numbers.
fn numbers(v: &JsValue, key: &str) -> Result<Option<Vec<u32>>, JsError> {
    let Some(x) = get(v, key)? else { return Ok(None) };
    if js_sys::Array::is_array(&x) {
        let a = js_sys::Array::from(&x);
        a.iter().map(|e| as_u32(&e, key)).collect::<Result<Vec<_>, _>>().map(Some)
    } else {
        as_u32(&x, key).map(|n| Some(vec![n]))
    }
}

/// PyTorch's `int or (int, int)`, with a default where absent.
fn pair(v: &JsValue, key: &str, default: Option<u32>) -> Result<[u32; 2], JsError> {
    match (numbers(v, key)?.as_deref(), default) {
        (Some([a]), _) => Ok([*a, *a]),
        (Some([a, b]), _) => Ok([*a, *b]),
        (Some(other), _) => Err(JsError::new(&format!("{key} has 1 or 2 numbers, not {other:?}"))),
        (None, Some(d)) => Ok([d, d]),
        (None, None) => Err(JsError::new(&format!("the spec needs {key}"))),
    }
}

fn flag(v: &JsValue, key: &str) -> Result<bool, JsError> {
    match get(v, key)? {
        None => Ok(false),
        Some(x) => x.as_bool().ok_or_else(|| JsError::new(&format!("{key} must be true or false"))),
    }
}

fn optional_string(v: &JsValue, key: &str) -> Result<Option<String>, JsError> {
    match get(v, key)? {
        None => Ok(None),
        Some(x) => x.as_string().map(Some).ok_or_else(|| JsError::new(&format!("{key} must be a string"))),
    }
}
